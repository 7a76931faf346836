"""Every key of `[trainer.args]` belongs to a section (sections.py), and every section's key is read by the code:
a key added to TrainerArgs and left out of its section, or accepted and read nowhere, fails here instead of being
silently ignored."""

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from vfrl import sections
from vfrl.config import TrainerArgs

SRC = Path(__file__).resolve().parents[1] / "src" / "vfrl"
SECTIONS = [cls for name, cls in vars(sections).items() if name.endswith("Section") and dataclasses.is_dataclass(cls)]
# accepted for configs copied from verifiers' vf-rl, and read by nothing: no prompt is cut by it (max_seq_len cuts
# prompt and completion together); vfrl says so where the key is documented (docs/python_api.md)
NOT_READ = {"max_prompt_len"}


def keys_of(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(f.type)} - {"sampling",
                                                                                                 "evaluation"}


def test_every_key_is_in_a_section():
    in_sections = set().union(*map(keys_of, SECTIONS))
    assert set(TrainerArgs.model_fields) - in_sections == NOT_READ


def test_every_section_is_handed_out_by_the_config():
    args = TrainerArgs()
    handed = {type(value) for name in dir(type(args)) if isinstance(getattr(type(args), name), property)
              for value in [getattr(args, name)]}
    assert set(SECTIONS) <= handed


WHOLE = set().union(*(keys_of(cls) for cls in SECTIONS if "asdict(self)" in inspect.getsource(cls)))  # sent whole


@pytest.mark.parametrize("key", sorted(set().union(*map(keys_of, SECTIONS)) - WHOLE))
def test_every_key_of_a_section_is_read_somewhere(key):
    """Read as an attribute (`args.loss.beta`, `self.epsilon_high`), by the code or a section's own property;
    a section that sends itself whole (SamplingSection.request: every key to vLLM) reads all of its keys."""
    code = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p.name != "config.py")
    assert re.search(rf"\.{key}\b", code), f"trainer.args.{key} is read nowhere"


def test_the_rule_sees_a_key_read_nowhere():
    code = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p.name != "config.py")
    assert not re.search(r"\.max_prompt_len\b", code) and WHOLE >= {"top_p", "top_k", "min_p"}
