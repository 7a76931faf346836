"""A verifiers 0.4 taskset without end: `load()` is a generator that never stops (INFINITE), as a procedural
game's taskset is. Counts the tasks it has built in `BUILT`, so a test can see how far it was read."""

import itertools

import verifiers.v1 as vf

BUILT = [0]


class EchoData(vf.TaskData):
    answer: str


class EchoTask(vf.Task[EchoData]):
    @vf.stop
    async def one_reply(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return float((trace.last_reply or "").strip() == self.data.answer)


class EndlessTaskset(vf.Taskset[EchoTask, vf.TasksetConfig]):
    INFINITE = True

    def load(self):
        for i in itertools.count():
            BUILT[0] += 1
            word = "abcdefgh"[i % 8] * (1 + i % 5)
            yield EchoTask(EchoData(idx=i, prompt=f"Say {word}", answer=word), self.config.task)


__all__ = ["EndlessTaskset"]
