"""A verifiers 0.4 package whose `@vf.reward` raises on every other task (its odd ones), as a misported or
buggy reward function does: verifiers fails those episodes (TaskError) before any reward is recorded.
Written only against `verifiers.v1`'s public API."""

import verifiers.v1 as vf

WORDS = ["abc", "hello", "stone", "lamp"]


class FlakyData(vf.TaskData):
    answer: str


class FlakyTask(vf.Task[FlakyData]):
    @vf.stop
    async def one_reply(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        if self.data.idx % 2:
            raise KeyError(f"no reference for task {self.data.idx}")
        return float((trace.last_reply or "").strip() == self.data.answer)


class FlakyTaskset(vf.Taskset[FlakyTask, vf.TasksetConfig]):
    def load(self):
        return [FlakyTask(FlakyData(idx=i, prompt=w, system_prompt="Reverse the text.", answer=w[::-1]),
                          self.config.task)
                for i, w in enumerate(WORDS)]


__all__ = ["FlakyTaskset"]
