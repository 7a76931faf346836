"""A verifiers 0.4 tool-using taskset, written only against `verifiers.v1`'s public API.

The model is asked to add two numbers; the taskset's `vf.Toolset` (tools.py, which verifiers runs as a
local MCP server, one for all rollouts) offers `add`. The model calls it, verifiers runs the call and sends
the result back as a tool message, and the model's second turn should say the sum. `@vf.reward` scores
that final reply, `@vf.metric` counts the tool calls. The tool message is environment text: a trainer
must give its tokens no loss. No vfrl import and no entry point, as a package made for verifiers would have.
"""

import verifiers.v1 as vf

from v1_calc.tools import CalcToolset

SUMS = [(2, 3)]


class CalcData(vf.TaskData):
    total: int


class CalcTask(vf.Task[CalcData]):
    @vf.reward(weight=1.0)
    async def said_the_sum(self, trace: vf.Trace) -> float:
        return float((trace.last_reply or "").strip() == str(self.data.total))

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(sum(len(m.tool_calls or []) for m in trace.assistant_messages))


class CalcTaskset(vf.Taskset[CalcTask, vf.TasksetConfig]):
    @classmethod
    def toolsets(cls, config):
        return [CalcToolset(vf.ToolsetConfig())]  # one server for the taskset, shared by its rollouts

    def load(self):
        return [CalcTask(CalcData(idx=i, prompt=f"add {a} {b}", total=a + b), self.config.task)
                for i, (a, b) in enumerate(SUMS)]


__all__ = ["CalcTaskset"]
