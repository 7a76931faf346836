"""calculator: arithmetic problems solved with a `calculate` tool.

The tool evaluates the expression with a small AST evaluator (numbers, + - * / // % **, unary
minus, parentheses), never Python's eval: nothing the model writes runs as code. Powers and result
sizes are bounded so an expression cannot stall the trainer. Its mistakes come back to the model as
the tool message.

Reward: 1.0 when the last `\\boxed{}` of the final reply equals the answer (MathRubric); the number
of tool calls (`tool_calls`) and failed ones (`tool_errors`) are logged with weight 0.

`style="bare"` is for small models whose template has no tool syntax (SmolLM2-135M-Instruct): products of two
two-digit numbers ("What is 29 * 84?"), which such a model cannot work out alone, a worked example before the
question (the call as a `<tool_call>` block in the reply text, the tool's result, the bare number), and the last
number of the final reply as the answer.
"""

import ast
import operator
import random
import re

import vfrl

SYSTEM_PROMPT = (
    'Use the tool: <tool_call>{"name": "calculate", "arguments": {"expression": "2*3"}}</tool_call>. '
    "End with \\boxed{answer}."
)
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
MAX_LEN, MAX_EXPONENT, MAX_MAGNITUDE = 200, 64, 1e30


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex) or abs(result) > MAX_MAGNITUDE:
            raise ValueError("result is out of range")
        return result
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:40]}; use numbers, + - * / // % ** and parentheses")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 12"
    """
    if len(expression) > MAX_LEN:
        raise ValueError(f"expression is longer than {MAX_LEN} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    value = _eval(tree)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(round(value, 10) if isinstance(value, float) else value)


def make_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, c = rng.randint(12, 99), rng.randint(12, 99), rng.randint(2, 99)
        op = rng.choice(["+", "-", "*"])
        expression = f"{a} * {b} {op} {c}" if rng.random() < 0.5 else f"({a} {op} {c}) * {b}"
        rows.append({"question": f"What is {expression}?", "answer": calculate(expression), "task": "calculator"})
    return rows


def product_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        expression = f"{rng.randint(12, 99)} * {rng.randint(12, 99)}"
        rows.append({"question": f"What is {expression}?", "answer": calculate(expression), "task": "calculator"})
    return rows


def call_text(expression: str) -> str:
    return '<tool_call>{"name": "calculate", "arguments": {"expression": "%s"}}</tool_call>' % expression


BARE_SYSTEM_PROMPT = f"You have a calculator tool. Call it like this: {call_text('2 * 3')} Then answer with the number."
WORKED_EXAMPLE = [{"role": "user", "content": "What is 17 * 23?"},
                  {"role": "assistant", "content": call_text("17 * 23")},
                  {"role": "tool", "content": "391"}, {"role": "assistant", "content": "391"}]


def last_number_reward(completion, answer, parser) -> float:
    numbers = re.findall(r"-?\d+", parser.parse_answer(completion) or "")
    return float(bool(numbers) and numbers[-1] == answer)


def tool_calls(state) -> float:
    return float(state.get("tool_calls", 0))


def tool_errors(state) -> float:
    return float(state.get("tool_errors", 0))


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, max_turns: int = 4,
                     style: str = "boxed", seed: int = 0) -> vfrl.ToolEnv:
    if style not in ("boxed", "bare"):
        raise ValueError(f"style must be 'boxed' or 'bare', got {style!r}")
    bare = style == "bare"
    rubric = vfrl.Rubric(funcs=[last_number_reward], weights=[1.0]) if bare else vfrl.MathRubric()
    rubric.add_reward_func(tool_calls, weight=0.0)
    rubric.add_reward_func(tool_errors, weight=0.0)
    rows = product_rows if bare else make_rows
    return vfrl.ToolEnv(
        tools=[calculate],
        dataset=rows(num_train_examples, seed),
        eval_dataset=rows(num_eval_examples, seed + 1),
        system_prompt=BARE_SYSTEM_PROMPT if bare else SYSTEM_PROMPT,
        few_shot=WORKED_EXAMPLE if bare else None,
        rubric=rubric,
        max_turns=max_turns,
        env_id="calculator",
    )
