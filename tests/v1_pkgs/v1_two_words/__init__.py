"""A multi-turn verifiers 0.4 environment package, written only against `verifiers.v1`'s public API.

Two turns: the task's prompt is a word to reverse; after the first reply the environment (the
package's own `vf.Env`, which verifiers picks up from `__all__`) sends a second word as the next user
turn. `@vf.reward` scores the share of replies that reversed their word, `@vf.metric` counts the
turns. Its user turn is environment text: a trainer must give those tokens no loss.
No vfrl import and no entry point, as a package made for verifiers would have.
"""

import verifiers.v1 as vf

PAIRS = [("abc", "lamp"), ("hello", "stone"), ("river", "cloud"), ("stone", "abc")]


class TwoWordsData(vf.TaskData):
    second: str


class TwoWordsTask(vf.Task[TwoWordsData]):
    @vf.reward(weight=1.0)
    async def reversed_each(self, trace: vf.Trace) -> float:
        words = [self.data.prompt_text, self.data.second]
        replies = [m.content or "" for m in trace.assistant_messages]
        return sum(r.strip() == w[::-1] for r, w in zip(replies, words)) / len(words)

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class TwoWordsTaskset(vf.Taskset[TwoWordsTask, vf.TasksetConfig]):
    def load(self):
        return [TwoWordsTask(TwoWordsData(idx=i, prompt=a, second=b, system_prompt="Reverse the text."),
                             self.config.task)
                for i, (a, b) in enumerate(PAIRS)]


class TwoWordsConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class TwoWordsEnv(vf.Env[TwoWordsConfig]):
    """The environment's side of the conversation: the second word, once the first reply is in."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            first = await chat.turn()
            if not first.terminated:
                await chat.turn(task.data.second)


__all__ = ["TwoWordsTaskset", "TwoWordsEnv"]
