"""A dataset that takes long to build says so (it runs before the first step's line; silent, vf-rl looks hung),
and how it ended; a fast one says nothing."""

import re
import threading

import pytest

import vfrl
from vfrl.envs import slow_notice


@pytest.fixture
def said(monkeypatch):
    """The lines said, and an event set at the first; every step counts as slow."""
    lines, first = [], threading.Event()

    def say(line):
        lines.append(line)
        first.set()

    monkeypatch.setattr(slow_notice, "say", say)
    monkeypatch.setattr(slow_notice, "AFTER_S", 0.0)
    return lines, first


def test_a_slow_build_says_what_it_does_then_how_long_it_took(said):
    lines, first = said

    def build():
        assert first.wait(60)  # still building when the line comes
        return [{"question": "q", "answer": "a"}] * 3

    env = vfrl.SingleTurnEnv(dataset=build, env_id="slow-env")
    assert len(env.dataset) == 3
    assert lines[0] == ("slow-env: building its dataset (test_a_slow_build_says_what_it_does_then_how_long_it_took."
                        "<locals>.build()) (taking a while)")
    assert re.fullmatch(r"slow-env: building its dataset \(.*build\(\)\): 3 rows in \d+\.\ds", lines[1])
    assert len(lines) == 2


def test_a_slow_build_that_fails_says_it_failed(said):
    lines, first = said

    def build():
        assert first.wait(60)
        raise ConnectionError("Couldn't reach 'org/data' on the Hub")

    with pytest.raises(vfrl.DatasetBuildError):
        vfrl.SingleTurnEnv(dataset=build, env_id="slow-env").dataset
    assert re.fullmatch(r"slow-env: building its dataset \(.*build\(\)\): failed in \d+\.\ds", lines[1])


def test_a_fast_build_says_nothing(monkeypatch):
    lines = []
    monkeypatch.setattr(slow_notice, "say", lines.append)
    assert len(vfrl.SingleTurnEnv(dataset=lambda: [{"question": "q", "answer": "a"}], env_id="fast-env").dataset) == 1
    assert lines == []
