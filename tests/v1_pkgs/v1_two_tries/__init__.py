"""A verifiers 0.4 environment package whose episodes hold two traces, written only against `verifiers.v1`'s public API.

Each episode plays the package's `vf.Env` (verifiers picks it up from `__all__`): two separate conversations
of the one trainable agent on the same task, side by side, each two turns (reverse the task's word, then a
second word the environment sends). Each conversation is a trace of its own, scored on its own by `@vf.reward`
(the share of replies that reversed their word; `@vf.metric` counts the turns): a trainer gets two samples per
episode, each with its own reward. The environment's turn is environment text: a trainer must give those tokens
no loss. No vfrl import and no entry point, as a package made for verifiers would have.
"""

import asyncio

import verifiers.v1 as vf

PAIRS = [("abc", "lamp"), ("hello", "stone"), ("river", "cloud"), ("stone", "abc")]


class TwoTriesData(vf.TaskData):
    second: str


class TwoTriesTask(vf.Task[TwoTriesData]):
    @vf.reward(weight=1.0)
    async def reversed_each(self, trace: vf.Trace) -> float:
        words = [self.data.prompt_text, self.data.second]
        replies = [m.content or "" for m in trace.assistant_messages]
        return sum(r.strip() == w[::-1] for r, w in zip(replies, words)) / len(words)

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class TwoTriesTaskset(vf.Taskset[TwoTriesTask, vf.TasksetConfig]):
    def load(self):
        return [TwoTriesTask(TwoTriesData(idx=i, prompt=a, second=b, system_prompt="Reverse the text."),
                             self.config.task)
                for i, (a, b) in enumerate(PAIRS)]


class TwoTriesConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class TwoTriesEnv(vf.Env[TwoTriesConfig]):
    """Two tries at the task, side by side, each a conversation of its own: the word, then the second word."""

    async def run(self, task, agents):
        async def one_try():
            async with agents.agent.interaction(task) as chat:
                if not (await chat.turn()).terminated:
                    await chat.turn(task.data.second)

        await asyncio.gather(one_try(), one_try())


__all__ = ["TwoTriesTaskset", "TwoTriesEnv"]
