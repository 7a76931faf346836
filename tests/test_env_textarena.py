"""TextArenaEnv plays textarena's real Wordle-v0 to its end: a solve, six misses, two invalid moves, each scored by
a classic package's rubric (tests/classic_pkgs/classic_wordle.py), and once against the real vLLM.

textarena's Wordle reads nltk's `words` corpus and tagger, which nltk downloads from the network; the tests give it
a small nltk data folder made here (a word list and a tagger that knows its nouns): textarena's code runs as it is,
on data it could have downloaded.
"""

import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

import vfrl as vf

pytest.importorskip("textarena")
sys.path.insert(0, str(Path(__file__).parent / "classic_pkgs"))

NOUNS = ["crane", "slate", "house", "stone", "bread", "plant"]  # the secret words: 5 letters and nouns
OTHERS = ["about", "quick", "abram"]  # in the corpus, not secrets: not nouns, or a proper noun


def make_nltk_data(root: Path) -> Path:
    """nltk's layout: corpora/words/{en,en-basic} and taggers/averaged_perceptron_tagger_eng/*.json."""
    words = root / "corpora" / "words"
    words.mkdir(parents=True)
    (words / "en-basic").write_text("\n".join(NOUNS + OTHERS[:2]) + "\n")
    (words / "en").write_text("\n".join(NOUNS + OTHERS[:2] + ["Abram"]) + "\n")
    (words / "README").write_text("made by tests/test_env_textarena.py\n")
    tagger = root / "taggers" / "averaged_perceptron_tagger_eng"
    tagger.mkdir(parents=True)
    tagdict = {**{w: "NN" for w in NOUNS}, "about": "IN", "quick": "JJ", "test": "NN"}
    for part, value in {"weights": {}, "tagdict": tagdict, "classes": ["NN", "IN", "JJ"]}.items():
        (tagger / f"averaged_perceptron_tagger_eng.{part}.json").write_text(json.dumps(value))
    return root


@pytest.fixture(scope="module")
def env(nltk_data_folder):
    import nltk

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nltk.data, "path", [str(nltk_data_folder)])  # conftest: make_nltk_data's, once a session
        yield vf.load_environment("classic_wordle", num_train_examples=4, num_eval_examples=2)


def play(env, replies, example_id=0):
    client = FakeOpenAI(replies)
    return asyncio.run(env.run_group(client, "m", example_id, 1, {"max_tokens": 40}, asyncio.Semaphore(1)))[0]


def guesses(*words):
    return [f"<guess>[{w}]</guess>" for w in words]


def game_turns(r):
    return [m["content"] for m in r.completion if m["role"] == "user"]


def test_rows_are_the_games_opening_and_seeded_secrets_from_its_word_list(env):
    rows = env.dataset + env.eval_dataset
    rng = random.Random(0)
    assert [r["answer"] for r in rows] == [rng.choice(NOUNS) for _ in range(6)]  # verifiers' draws for seed 0
    assert len(env.dataset) == 4 and len(env.eval_dataset) == 2
    assert {r["prompt"][1]["content"] for r in rows} == {env.dataset[0]["question"]}
    assert "You are Playing Wordle" in env.dataset[0]["question"] and env.dataset[0]["prompt"][0]["role"] == "system"


def test_a_solve_ends_on_the_games_verdict_and_scores(env):
    secret = env.dataset[0]["answer"]
    miss = next(w for w in NOUNS if w != secret)
    r = play(env, guesses(miss, secret))
    turns = game_turns(r)
    assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant", "user"]
    assert turns[0].startswith(f"You submitted [{miss}].\nFeedback:\n{' '.join(miss.upper())}\n")
    assert turns[1] == "Congratulations! You guessed the word correctly!"
    assert r.reward == pytest.approx(1.0 + 0.5 / 2) and r.metrics["format_reward_func"] == 1.0


def test_six_misses_end_the_game_unsolved(env):
    secret = env.dataset[0]["answer"]
    misses = [w for w in NOUNS if w != secret] + ["about"]
    r = play(env, guesses(*misses[:6]))
    assert len(r.turn_spans) == 6 and r.reward == 0.0
    assert game_turns(r)[-1].startswith("The turn limit has been reached.")
    assert f"The secret word was: **{secret}**." in game_turns(r)[-1]


def test_no_guess_and_then_a_word_outside_the_dictionary_lose_on_invalid_moves(env):
    r = play(env, ["I am not sure.", "<guess>[zzzzz]</guess>"])
    assert len(r.turn_spans) == 2 and r.reward == 0.0
    first, last = game_turns(r)
    # no <guess> in any reply so far: the parser gives None, played as "[None]"
    assert "Reason: Your word must be exactly 5 letters." in first
    assert last == "Invalid Move: 'zzzzz' is not an English word."


def test_rollouts_play_separate_games(env):
    secret = env.dataset[0]["answer"]
    miss = next(w for w in NOUNS if w != secret)
    assert play(env, guesses(miss, secret)).reward > 1.0
    assert play(env, guesses(miss, secret)).reward > 1.0  # the same guess again: a fresh game allows it
    assert env.ta_env.state.game_state["guess_history"] == []


def test_a_game_without_a_secret_word_is_one_line():
    with pytest.raises(ValueError, match="^TextArenaEnv plays games with one secret word .* GuessTheNumber-v0 has "):
        vf.TextArenaEnv(game="GuessTheNumber-v0", num_train_examples=1)
    with pytest.raises(ValueError, match="^TextArenaEnv: Environment Wordle-v9 not found in registry.$"):
        vf.TextArenaEnv(game="Wordle-v9", num_train_examples=1)


def test_without_textarena_it_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(ImportError, match=r"^TextArenaEnv needs the textarena package: pip install 'vfrl\[textarena"):
        vf.TextArenaEnv(num_train_examples=1)


def test_without_nltk_data_it_is_one_line_and_nothing_is_downloaded(tmp_path):
    """In a fresh Python: textarena's Wordle module asks nltk for its data once, at import."""
    code = ("import nltk, vfrl as vf\n"
            f"nltk.data.path[:] = [{str(tmp_path)!r}]\n"
            "nltk.downloader.Downloader._update_index = lambda *a, **k: print('NETWORK')\n"
            "try:\n    vf.TextArenaEnv(num_train_examples=1)\n"
            "except LookupError as e:\n    print(e)\n"
            "print(nltk.download.__qualname__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == [
        "TextArenaEnv('Wordle-v0') needs nltk's averaged_perceptron_tagger_eng and words (textarena downloads them, "
        "vfrl does not): run `python -m nltk.downloader averaged_perceptron_tagger_eng words` once, or set NLTK_DATA "
        "to a folder that has them",
        "Downloader.download",  # nltk's own again
    ], out.stderr


@pytest.mark.e2e
def test_wordle_against_the_real_vllm(env, shared_vllm_server):
    """The tiny model writes no <guess>: the game takes two invalid moves and ends itself after two turns."""
    from openai import AsyncOpenAI

    srv = shared_vllm_server

    async def go():
        client = AsyncOpenAI(base_url=srv.base_url, api_key=srv.api_key)
        return await env.run_group(client, srv.model, 1, 2, {"temperature": 1.0, "max_tokens": 64, "seed": 3},
                                   asyncio.Semaphore(2))

    for r in asyncio.run(go()):
        assert r.error is None and not r.truncated and r.sequence_mode == "chat"
        assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant", "user"]
        assert game_turns(r)[-1] == "Invalid Move: Your word must be exactly 5 letters."
        assert len(r.turn_spans) == 2 and r.reward == 0.0
        env_tokens = r.turn_spans[1][0] - r.turn_spans[0][1]  # the game's turn between the two replies
        assert env_tokens > 0 and r.completion_mask.count(0) >= env_tokens
