"""Any chat-message shape the OpenAI format and verifiers 0.4 allow reaches the console's completions table,
wandb's table, the rollout files, vf-eval's results.jsonl, the verifiers 0.4 conversion and the parsers without
an error, and what the message says shows there (a run once died at its first table: an assistant message with
no "content"). The shapes are generated: roles x contents x extra fields x wrappers (dict, vfrl Message, an
object with attributes, a pydantic model, verifiers 0.4's own types), with random text (unicode, rich markup,
empty strings)."""

import asyncio
import io
import itertools
import json
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from vfrl.rollout_types import Rollout
from vfrl.envs.messages import Message, last_text, message_text
from vfrl.envs.parsers import Parser, ThinkParser, XMLParser
from vfrl.trainer.console import TrainerConsole

try:
    import verifiers.v1.types as v1_types
except ImportError:  # verifiers 0.4 is an extra: without it, its own message types are left out
    v1_types = None

ROLES = ("system", "user", "assistant", "tool", "developer")
CONTENTS = ("missing", "none", "text", "text_parts", "text_and_image", "image_only")
EXTRAS = ("plain", "openai_tool_call", "flat_tool_call", "dict_arguments", "reasoning_content", "reasoning",
          "tool_fields")
WRAPPERS = ("dict", "message", "object", "pydantic") + (("verifiers",) if v1_types else ())
# no quote characters: a piece's repr then reads the same inside the console's repr of the whole cell
ALPHABET = [*"abcXYZ 019", "é", "ß", "中文", "🙂", "Ω∑", "[bold]", "[/]", "[red]x[/red]", "\\", "\n", "\t",
            "<think>"]
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


class AnyMessage(BaseModel):
    """A pydantic message of no fixed schema (as a provider SDK's types with extra fields)."""

    model_config = ConfigDict(extra="allow")


@dataclass
class Shape:
    label: str
    message: Any
    shown: list[str]  # what the display text must contain
    text: str  # the content's text, as reward functions read it


def random_text(rng: random.Random) -> str:
    return "" if rng.random() < 0.15 else "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 6)))


def content_of(kind: str, rng: random.Random) -> tuple[dict[str, Any], list[str], str]:
    """The content field(s) of a message, what must show of it, its text."""
    a, b = random_text(rng), random_text(rng)
    if kind == "missing":
        return {}, [], ""
    if kind == "none":
        return {"content": None}, [], ""
    if kind == "text":
        return {"content": a}, [a], a
    if kind == "text_parts":
        parts = [{"type": "text", "text": a}, {"type": "text", "text": b}]
        return {"content": parts}, [a, b], "\n".join(t for t in (a, b) if t)
    if kind == "text_and_image":
        return {"content": [{"type": "text", "text": a}, IMAGE]}, [a, "[image_url]"], a
    return {"content": [IMAGE]}, ["[image_url]"], ""


def extra_of(kind: str, rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    name, arg = "fn_" + random_text(rng).replace("\n", ""), random_text(rng)
    args = json.dumps({"q": arg}, ensure_ascii=False)
    if kind == "openai_tool_call":
        return {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}]}, \
            ["[tool call]", f"{name}({args})"]
    if kind == "flat_tool_call":  # verifiers 0.4's ToolCall
        return {"tool_calls": [{"id": "c1", "type": "function", "name": name, "arguments": args}]}, \
            ["[tool call]", f"{name}({args})"]
    if kind == "dict_arguments":
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": {"q": arg}}}
        return {"tool_calls": [call]}, ["[tool call]", name]
    if kind in ("reasoning_content", "reasoning"):
        return {kind: arg}, [arg]
    if kind == "tool_fields":
        return {"tool_call_id": "c1", "name": name}, []
    return {}, []


def wrap(wrapper: str, fields: dict[str, Any]) -> Any:
    """`fields` as a message of this wrapper; None when the wrapper cannot hold them (verifiers' types validate)."""
    if wrapper == "dict":
        return dict(fields)
    if wrapper == "message":
        return Message(fields)
    if wrapper == "object":
        return SimpleNamespace(**fields)
    if wrapper == "pydantic":
        return AnyMessage(**fields)
    kinds = {"system": v1_types.SystemMessage, "user": v1_types.UserMessage, "assistant": v1_types.AssistantMessage,
             "tool": v1_types.ToolMessage}
    if fields["role"] not in kinds:
        return None
    kind = kinds[fields["role"]]
    if not set(fields) <= set(kind.model_fields):  # pydantic would drop the field: not a shape of this type
        return None
    try:
        return kind.model_validate(fields)
    except ValidationError:
        return None


def all_shapes(seed: int = 0) -> list[Shape]:
    rng = random.Random(seed)
    shapes = []
    for role, content, extra, wrapper in itertools.product(ROLES, CONTENTS, EXTRAS, WRAPPERS):
        content_fields, shown, text = content_of(content, rng)
        extra_fields, extra_shown = extra_of(extra, rng)
        message = wrap(wrapper, {"role": role, **content_fields, **extra_fields})
        if message is not None:
            shapes.append(Shape(f"{role}/{content}/{extra}/{wrapper}", message, shown + extra_shown, text))
    return shapes


SHAPES = all_shapes()
ANSWERS = (3, "x", None, {"a": [1]}, 2.5)  # answers of one batch differ in type across environments


def rollouts_of(shapes: list[Shape]) -> list[Rollout]:
    """A rollout per shape, the shape last in its completion; prompts a list ending with the shape, a plain
    string (completion-style environments) or empty; completions of one message or after a tool exchange."""
    out = []
    for i, s in enumerate(shapes):
        prompt = ([{"role": "system", "content": "sys"}, s.message], "plain prompt é [bold]", [])[i % 3]
        after_tool = [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}, s.message]
        completion = ([s.message], after_tool)[i % 2]
        out.append(Rollout(example_id=i, prompt=prompt, completion=completion, answer=ANSWERS[i % len(ANSWERS)],
                           prompt_ids=[], completion_ids=[], completion_logprobs=[], completion_mask=[], policy="p",
                           reward=0.5))
    return out


def assert_shown(text: str, shape: Shape, quoted: bool = False) -> None:
    for piece in shape.shown:
        assert (repr(piece)[1:-1] if quoted else piece) in text, (shape.label, piece, text)


def test_the_shapes_cover_every_role_content_extra_and_wrapper():
    labels = [s.label.split("/") for s in SHAPES]
    for i, values in enumerate((ROLES, CONTENTS, EXTRAS, WRAPPERS)):
        assert {label[i] for label in labels} == set(values)
    assert len(SHAPES) > 600


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_message_text_shows_what_every_shape_says(wrapper):
    for shape in (s for s in SHAPES if s.label.endswith("/" + wrapper)):
        assert_shown(message_text(shape.message), shape)
        assert last_text([{"role": "user", "content": "q"}, shape.message]) == message_text(shape.message)


def test_last_text_of_no_messages_a_string_or_a_lone_message():
    assert last_text([]) == last_text(None) == ""
    assert last_text("plain é") == "plain é"
    assert last_text({"role": "assistant", "content": "alone"}) == "alone"
    assert message_text(object()) == ""  # not a message: nothing to show, no error


def test_console_completions_table_shows_every_shape(monkeypatch):
    monkeypatch.setenv("COLUMNS", "4000")  # one line per row: row i is rollout i
    rollouts = rollouts_of(SHAPES)
    out = io.StringIO()
    TrainerConsole(out).completions(1, rollouts, limit=len(rollouts))
    rows = [line for line in out.getvalue().splitlines() if line.startswith("|") and "0.500" in line]
    assert len(rows) == len(rollouts)
    for row, r, shape in zip(rows, rollouts, SHAPES):
        assert_shown(row, shape, quoted=True)
        assert repr(last_text(r.prompt))[1:-1] in row


def test_console_at_its_pipe_width_takes_every_shape():
    out = io.StringIO()
    rollouts = rollouts_of(SHAPES)
    TrainerConsole(out).completions(3, rollouts, limit=len(rollouts))
    assert out.getvalue().count("0.500") == len(rollouts)


def test_wandb_completions_table_takes_every_shape_and_mixed_answers():
    wandb = pytest.importorskip("wandb")  # its real Table (which refuses a column of mixed types), no run
    from vfrl.trainer.wandb_sink import WandbSink

    sink = WandbSink.__new__(WandbSink)
    logged = []
    sink.wandb, sink.run = wandb, SimpleNamespace(log=logged.append)
    rollouts = rollouts_of(SHAPES)
    sink.completions(2, rollouts)
    (record,) = logged
    rows = record["completions"].data
    assert len(rows) == len(rollouts) and record["step"] == 2
    for (_, example_id, prompt, completion, answer, _), r, shape in zip(rows, rollouts, SHAPES):
        assert example_id == r.example_id and prompt == last_text(r.prompt) and answer == str(r.answer)
        assert_shown(completion, shape)


def test_rollout_files_save_every_shape_and_read_back_the_same_text(tmp_path):
    from vfrl.trainer.run_log import write_rollouts

    rollouts = rollouts_of(SHAPES)
    write_rollouts(tmp_path / "step_1.jsonl", rollouts)
    lines = (tmp_path / "step_1.jsonl").read_text().splitlines()
    assert len(lines) == len(rollouts)
    for line, r, shape in zip(lines, rollouts, SHAPES):
        row = json.loads(line)
        assert last_text(row["completion"]) == last_text(r.completion), shape.label
        assert last_text(row["prompt"]) == last_text(r.prompt), shape.label


def test_vf_eval_results_save_every_shape(tmp_path):
    from vfrl.envs.cli.eval import run_eval

    rollouts = rollouts_of(SHAPES)

    class ShapesEnv:
        async def run_group(self, client, model, example_id, n, sampling, semaphore, eval=False,
                            record_tokens=True, faults=None):
            return [rollouts[example_id]]

    results = tmp_path / "results.jsonl"
    done = asyncio.run(run_eval(ShapesEnv(), None, "m", len(rollouts), 1, {}, 8, results, lambda k: None,
                                record_tokens=False))
    assert len(done) == len(rollouts)
    rows = {row["example_id"]: row for row in map(json.loads, results.read_text().splitlines())}
    for r, shape in zip(rollouts, SHAPES):
        assert last_text(rows[r.example_id]["completion"]) == last_text(r.completion), shape.label


def v1_branch(messages: list) -> SimpleNamespace:
    """A verifiers trace branch (duck-typed): 2 prompt tokens, 2 sampled, carrying `messages`."""
    nodes = [SimpleNamespace(token_ids=[1, 2], mask=[False, False], logprobs=[]),
             SimpleNamespace(token_ids=[3, 4], mask=[True, True], logprobs=[-0.1, -0.2])]
    return SimpleNamespace(nodes=nodes, token_ids=[1, 2, 3, 4], sampled_mask=[0, 0, 1, 1], trainable=True,
                           logprobs=[0.0, 0.0, -0.1, -0.2], messages=messages)


def test_verifiers_episodes_of_every_shape_become_plain_dict_rollouts():
    from vfrl.envs.verifiers_v1 import episode_rollouts, task_row

    for shape in SHAPES:
        reply = shape.message if message_role(shape.message) == "assistant" else Message(role="assistant", content="r")
        sent = [{"role": "system", "content": "sys"}, shape.message, reply]
        trace = SimpleNamespace(branches=[v1_branch(sent)], agent=SimpleNamespace(trainable=True), reward=1.0,
                                rewards={}, metrics={}, is_truncated=False)
        (r,) = episode_rollouts(SimpleNamespace(ok=True, errors=[], traces=[trace]), 0, "", "p")
        messages = r.prompt + r.completion
        assert len(messages) == 3 and all(type(m) is dict for m in messages), shape.label
        json.dumps(messages)  # plain JSON, no fallback needed
        assert [message_text(m) for m in messages] == [message_text(m) for m in sent], shape.label

        data = SimpleNamespace(prompt=[shape.message], system_prompt="sys", answer=None)
        row = task_row(SimpleNamespace(data=data), 0)
        assert all(type(m) is dict for m in row["prompt"]) and last_text(row["prompt"]) == message_text(shape.message)
    row = task_row(SimpleNamespace(data=SimpleNamespace(prompt="a plain prompt", system_prompt=None)), 1)
    assert row["prompt"] == [{"role": "user", "content": "a plain prompt"}]


def message_role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def test_parsers_read_the_content_text_of_every_assistant_shape():
    from vfrl.envs.math_rubric import MathRubric

    for shape in (s for s in SHAPES if s.label.startswith("assistant/")):
        completion = [{"role": "user", "content": "q"}, shape.message]
        assert Parser().parse_answer(completion) == shape.text, shape.label  # tool calls are not the reply's text
        XMLParser(["think", "answer"]).parse_answer(completion)
        for parser in (XMLParser(["answer"]), ThinkParser()):
            assert 0.0 <= parser.get_format_reward_func()(completion) <= 1.0
        assert MathRubric.correct_answer_reward_func(completion, "1") in (0.0, 1.0)
