"""hermes-text: tool calls found in a reply's text, on tokenizers that have no <tool_call> token.

Replies are generated (content, calls with varied arguments, malformed and unclosed blocks), tokenized by the real
SmolLM2 tokenizer (BPE, no tool tokens) and the tool test model's (characters, <tool_call> as one token), and read
back: each call's name and arguments, its status, a token span whose text holds the block, and content ids that
decode to the text before the first block.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("renderers")

from renderers.base import ToolCallParseStatus  # noqa: E402

from vfrl.envs.text_tool_calls import NAME, HermesTextToolParser, register  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONTENTS = ["", "Sure.", "Let me compute that.\n", "  ", "I'll use the tool: ", "数字 ü ", "a<b>c "]
ARGUMENTS = [{}, {"expression": "29 * 84"}, {"a": 2, "b": 3}, {"q": "x\ny", "nested": {"k": [1, 2.5, None, True]}},
             {"text": "</tool_call> inside a string is still JSON"}]


@pytest.fixture(scope="module", params=["smollm2", "tool-model"])
def tokenizer(request, tmp_path_factory):
    from transformers import AutoTokenizer

    if request.param == "smollm2":
        folder = ROOT / "models" / "smollm2-135m-instruct"
        assert (folder / "tokenizer.json").exists(), "scripts/install.sh makes models/smollm2-135m-instruct"
        return AutoTokenizer.from_pretrained(folder)
    from tool_model import TOOL_TEMPLATE, TOOL_TOKENS

    from vfrl.tiny_model import build_tokenizer

    return build_tokenizer(extra_special=TOOL_TOKENS, chat_template=TOOL_TEMPLATE)


def block(name: str | None, arguments) -> str:
    body = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    return "<tool_call>" + json.dumps(body, ensure_ascii=False) + "</tool_call>"


def replies(seed: int = 0, n: int = 60):
    """(text, expected calls as (status, name, arguments), content before the first block)."""
    rng = random.Random(seed)
    for _ in range(n):
        content = rng.choice(CONTENTS)
        text, calls = content, []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["ok", "ok", "ok", "bad_json", "no_name"])
            arguments = rng.choice(ARGUMENTS)
            if kind == "ok":
                name = rng.choice(["calculate", "add", "search_web"])
                text += block(name, arguments)
                calls.append((ToolCallParseStatus.OK, name, arguments))
            elif kind == "bad_json":
                text += '<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>'
                calls.append((ToolCallParseStatus.INVALID_JSON, None, None))
            else:
                text += block(None, arguments)
                calls.append((ToolCallParseStatus.MISSING_NAME, None, arguments))
            text += rng.choice(["", "\n", " "])
        if rng.random() < 0.2:
            text += '<tool_call>{"name": "add", "argu'
            calls.append((ToolCallParseStatus.UNCLOSED_BLOCK, None, None))
        yield text, calls, content


def test_every_generated_reply_reads_back_its_calls_and_content(tokenizer):
    parser = HermesTextToolParser(tokenizer)
    for text, expected, content in replies():
        ids = tokenizer.encode(text, add_special_tokens=False)
        content_ids, calls = parser.extract(ids)
        assert [(c.status, c.name if c.status == ToolCallParseStatus.OK else None,
                 c.arguments if c.status in (ToolCallParseStatus.OK, ToolCallParseStatus.MISSING_NAME) else None)
                for c in calls] == [(s, n if s == ToolCallParseStatus.OK else None, a) for s, n, a in expected], text
        assert ids[:len(content_ids)] == content_ids
        decoded = tokenizer.decode(content_ids)
        content = tokenizer.decode(tokenizer.encode(content, add_special_tokens=False))  # what the vocabulary holds
        assert content.startswith(decoded) and len(content) - len(decoded) <= 8, (text, decoded)
        for call in calls:
            start, end = call.token_span
            assert 0 <= start < end <= len(ids)
            assert ("<tool_call>" in tokenizer.decode(ids[start:end])
                    or call.status == ToolCallParseStatus.UNCLOSED_BLOCK)


def test_a_reply_without_a_block_is_all_content(tokenizer):
    parser = HermesTextToolParser(tokenizer)
    for text in ["", "391", "The answer is <b>42</b>.", "tool_call without brackets"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert parser.extract(ids) == (ids, [])


def test_renderers_finds_it_by_name_and_the_default_renderer_parses_a_smollm2_reply():
    from renderers.configs import DefaultRendererConfig
    from renderers.default import DefaultRenderer
    from transformers import AutoTokenizer

    register()
    tok = AutoTokenizer.from_pretrained(ROOT / "models" / "smollm2-135m-instruct")
    template = (ROOT / "configs" / "templates" / "smollm2_tool_calls.jinja").read_text()
    renderer = DefaultRenderer(tok, DefaultRendererConfig(tool_parser=NAME, chat_template=template))
    reply = tok.encode(block("calculate", {"expression": "29 * 84"}), add_special_tokens=False) + [tok.eos_token_id]
    parsed = renderer.parse_response(reply)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("calculate", {"expression": "29 * 84"})]
    assert parsed.content == ""
    # the template writes the call back as the block the model sampled: the next turn's prompt holds its tokens
    asked = [{"role": "user", "content": "What is 29 * 84?"}]
    prompt = renderer.render_ids(asked, add_generation_prompt=True)
    called = asked + [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "calculate", "arguments": json.dumps({"expression": "29 * 84"})}}]},
        {"role": "tool", "content": "2436", "tool_call_id": "c"}]
    assert renderer.render_ids(called, add_generation_prompt=True)[:len(prompt) + len(reply)] == prompt + reply


def test_renderer_config_reads_a_template_file_and_refuses_an_unknown_parser_in_one_line(tmp_path):
    from vfrl.envs.verifiers_v1 import V1EnvironmentError, renderer_config

    path = ROOT / "configs" / "templates" / "smollm2_tool_calls.jinja"
    made = renderer_config("e", {"name": "default", "tool_parser": NAME, "chat_template": str(path)})
    assert made.model_extra["chat_template"] == path.read_text()
    inline = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert renderer_config("e", {"name": "default", "chat_template": inline}).model_extra["chat_template"] == inline
    with pytest.raises(V1EnvironmentError, match=r"^env.renderer.chat_template: cannot read .*missing.jinja"):
        renderer_config("e", {"name": "default", "chat_template": str(tmp_path / "missing.jinja")})
    with pytest.raises(V1EnvironmentError, match=r"tool_parser = 'hermes' is invalid .* renderers has .*hermes-text"):
        renderer_config("e", {"name": "default", "tool_parser": "hermes"})


def test_the_classic_tool_env_reads_the_same_blocks_from_text():
    """envs/sampling.parse_tool_calls (a ToolEnv on a server without a tool-call parser) reads blocks as
    hermes-text does: a call per closed block, `invalid` (the text, for the model to be told) for one that is not
    JSON or has no name, nothing for an unclosed one."""
    from vfrl.envs.sampling import parse_tool_calls

    for text, expected, _ in replies(seed=1):
        calls = parse_tool_calls({"role": "assistant", "content": text})
        want = [(n, a) if s == ToolCallParseStatus.OK else ("invalid", None)
                for s, n, a in expected if s != ToolCallParseStatus.UNCLOSED_BLOCK]
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"]) if c["function"]["name"] != "invalid"
                else None) for c in calls]
        assert got == want, text
