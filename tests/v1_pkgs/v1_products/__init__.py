"""A verifiers 0.4 tool taskset for a small real model, written only against `verifiers.v1`'s public API.

"What is 29 * 84?": products of two two-digit numbers, which SmolLM2-135M-Instruct answers right about 2% of the
time alone. The taskset's `vf.Toolset` (tools.py, run by verifiers as a local MCP server) offers `multiply`; the
prompt holds a worked example (the question, the call, the tool's result, the bare number), and `@vf.reward`
scores the last number of the final reply, so the reward comes from using the tool. `@vf.metric` counts the calls.
No vfrl import and no entry point, as a package made for verifiers would have.
"""

import random
import re

import verifiers.v1 as vf

from v1_products.tools import ProductToolset

SYSTEM_PROMPT = "You have a multiply tool. Call it, then answer with the number."
EXAMPLE = [
    vf.UserMessage(content="What is 17 * 23?"),
    vf.AssistantMessage(content="", tool_calls=[
        vf.ToolCall(id="call_0", name="multiply", arguments='{"a": 17, "b": 23}')]),
    vf.ToolMessage(tool_call_id="call_0", content="391", name="multiply"),
    vf.AssistantMessage(content="391"),
]


class ProductData(vf.TaskData):
    product: int


class ProductTask(vf.Task[ProductData]):
    @vf.stop
    async def three_replies(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 3  # a model that keeps calling the tool stops here

    @vf.reward(weight=1.0)
    async def right_product(self, trace: vf.Trace) -> float:
        numbers = re.findall(r"-?\d+", trace.last_reply or "")
        return float(bool(numbers) and numbers[-1] == str(self.data.product))

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(sum(len(m.tool_calls or []) for m in trace.assistant_messages))


class ProductConfig(vf.TasksetConfig):
    num_tasks: int = 2000
    seed: int = 0


class ProductTaskset(vf.Taskset[ProductTask, ProductConfig]):
    @classmethod
    def toolsets(cls, config):
        return [ProductToolset(vf.ToolsetConfig())]  # one server for the taskset, shared by its rollouts

    def load(self):
        rng = random.Random(self.config.seed)
        tasks = []
        for i in range(self.config.num_tasks):
            a, b = rng.randint(12, 99), rng.randint(12, 99)
            prompt = [*EXAMPLE, vf.UserMessage(content=f"What is {a} * {b}?")]
            tasks.append(ProductTask(ProductData(idx=i, prompt=prompt, system_prompt=SYSTEM_PROMPT, product=a * b),
                                     self.config.task))
        return tasks


__all__ = ["ProductTaskset"]
