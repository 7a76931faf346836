"""A small verifiers 0.4 environment package, written only against `verifiers.v1`'s public API.

Single turn: reverse a short word. `@vf.reward` scores an exact reversal, `@vf.metric` logs the
reply's length. It has no vfrl import and no entry point, as a package made for verifiers would.
"""

import verifiers.v1 as vf

WORDS = ["abc", "hello", "stone", "lamp", "river", "cloud"]


class ReverseData(vf.TaskData):
    answer: str


class ReverseTask(vf.Task[ReverseData]):
    @vf.stop
    async def one_reply(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return float((trace.last_reply or "").strip() == self.data.answer)

    @vf.metric
    async def reply_len(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class ReverseTaskset(vf.Taskset[ReverseTask, vf.TasksetConfig]):
    def load(self):
        return [ReverseTask(ReverseData(idx=i, prompt=w, system_prompt="Reverse the text.", answer=w[::-1]),
                            self.config.task)
                for i, w in enumerate(WORDS)]


__all__ = ["ReverseTaskset"]
