"""The taskset's tool server: verifiers runs this module (`python -m v1_products.tools`) as an MCP server."""

import verifiers.v1 as vf


class ProductToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # the model calls `multiply`

    @vf.tool
    def multiply(self, a: int, b: int) -> str:
        """Multiply two integers."""
        return str(a * b)


if __name__ == "__main__":
    ProductToolset.run()
