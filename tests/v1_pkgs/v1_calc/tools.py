"""The taskset's tool server: verifiers runs this module (`python -m v1_calc.tools`) as an MCP server."""

import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the model calls `add`, not `calc_toolset_add`

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


if __name__ == "__main__":
    CalcToolset.run()
