"""TextArenaEnv: verifiers' classic wrapper of a textarena word game (`Wordle-v0` and its variants).

One rollout is one game. Every row's prompt is the game's opening message and its answer a secret word drawn
(seeded) from the game's own `word_list`; the rollout plays a copy of one game built at construction with that
secret. Each model reply's parsed `<guess>` is the move, and the game's next message (through `feedback_fn`)
is the next user turn, until textarena says the game is over; the last user turn is its reason ("Congratulations!
You guessed the word correctly!"). `state["ta_env"]` is the rollout's game. The rubric is the caller's (the
classic wordle package brings one): textarena's own reward is not the reward.

textarena's word games read nltk's `words` corpus and part-of-speech tagger, and ask nltk to download them while
a game is built. vfrl downloads nothing: a resource on disk (nltk's data folders, or one named in NLTK_DATA)
is used, and a missing one stops construction in one line that names it.
"""

from __future__ import annotations

import copy
import random
import re
from contextlib import contextmanager
from typing import Any, Callable

from vfrl.envs.faults import one_line
from vfrl.envs.multiturn import MultiTurnEnv
from vfrl.envs.parsers import XMLParser
from vfrl.envs.rubric import Rubric

# where nltk.download would put a resource of each kind; `nltk.data.find` looks there and in zips of them
NLTK_KINDS = ("corpora", "taggers", "tokenizers", "models", "misc", "sentiment", "chunkers", "grammars", "stemmers")


def nltk_on_disk(resource: str) -> bool:
    import nltk

    for kind in NLTK_KINDS:
        try:
            nltk.data.find(f"{kind}/{resource}")
            return True
        except LookupError:
            pass
    return False


@contextmanager
def nltk_without_downloads(missing: set[str]):
    """While a game is built, `nltk.download` answers from disk and never the network (textarena calls it at
    import and at every construction, and nltk asks the network first even for data it has); what it was asked
    for and lacks goes into `missing`. Process-wide for that time: nltk has one downloader."""
    import nltk

    real = nltk.download

    def from_disk(info_or_id=None, *args, **kwargs) -> bool:
        ids = [info_or_id] if isinstance(info_or_id, str) else list(info_or_id or [])
        missing.update(i for i in ids if not nltk_on_disk(i))
        return not missing.intersection(ids)

    nltk.download = from_disk
    try:
        yield
    finally:
        nltk.download = real


def make_game(game: str):
    """`ta.make(game)`, reset for one player, or one line saying what is missing."""
    try:
        import textarena as ta
    except ImportError:
        raise ImportError("TextArenaEnv needs the textarena package: pip install 'vfrl[textarena]'") from None
    missing: set[str] = set()
    try:
        with nltk_without_downloads(missing):
            ta_env = ta.make(env_id=game)
    except LookupError as e:  # nltk's: a resource it could not find
        missing.update(re.findall(r"Resource '(\w+)' not found", str(e)))
        if not missing:
            raise LookupError(f"TextArenaEnv({game!r}): {one_line(str(e), 300)}") from None
        names = sorted(missing)
        raise LookupError(
            f"TextArenaEnv({game!r}) needs nltk's {' and '.join(names)} (textarena downloads them, vfrl does not): "
            f"run `python -m nltk.downloader {' '.join(names)}` once, or set NLTK_DATA to a folder that has them"
        ) from None
    except ValueError as e:  # textarena's "Environment X not found in registry."
        raise ValueError(f"TextArenaEnv: {e}") from None
    ta_env.reset(num_players=1)
    return ta_env


def innermost(ta_env):
    """The game under textarena's wrappers."""
    while hasattr(ta_env, "env"):
        ta_env = ta_env.env
    return ta_env


def secret_words(game: str, base) -> list[str]:
    """The game's `word_list`, flattened (a few games keep it by category), for a game that plays one secret
    word (`game_state["secret_word"]`, which each rollout sets)."""
    words = getattr(base, "word_list", None)
    if words is None or "secret_word" not in base.state.game_state:
        raise ValueError(f"TextArenaEnv plays games with one secret word from the game's word_list (Wordle-v0 and "
                         f"its variants); textarena's {game} has none")
    if isinstance(words, dict):
        words = [w for v in words.values() for w in (v if isinstance(v, (list, tuple)) else [v])]
    return list(words)


class TextArenaEnv(MultiTurnEnv):
    def __init__(self, game: str = "Wordle-v0", num_train_examples: int = 1000, num_eval_examples: int = 0,
                 system_prompt: str | None = None, parser: XMLParser | None = None, rubric: Rubric | None = None,
                 feedback_fn: Callable[[str], str] = lambda observation: observation, seed: int = 0, **kwargs):
        self.game, self.feedback_fn, self.seed = game, feedback_fn, seed
        self.ta_env = make_game(game)
        base = innermost(self.ta_env)
        words = secret_words(game, base)
        _, opening = self.ta_env.get_observation()
        # the game's English dictionary (over 200,000 words) and word list are read-only: every rollout's copy
        # shares them (a copy takes 0.1 ms, not 100 ms)
        self.shared_memo = {id(x): x for x in (getattr(base, "dictionary", None), base.word_list) if x is not None}
        rng = random.Random(seed)  # the draws of verifiers' random.seed(seed); random.choice(...)
        n = num_train_examples + num_eval_examples
        rows = [{"question": opening, "answer": rng.choice(words)} for _ in range(n)]
        parser = parser or XMLParser(["think", "guess"], answer_field="guess")
        super().__init__(dataset=rows[:num_train_examples], eval_dataset=rows[num_train_examples:] or None,
                         system_prompt=system_prompt, parser=parser, rubric=rubric, **kwargs)

    def setup_state(self, state: dict[str, Any]) -> dict[str, Any]:
        ta_env = copy.deepcopy(self.ta_env, dict(self.shared_memo))
        ta_env.state.game_state["secret_word"] = state["answer"]
        state["ta_env"] = ta_env
        return state

    def is_completed(self, messages, state: dict[str, Any]) -> bool:
        return state["ta_env"].state.done

    def env_response(self, messages, state: dict[str, Any]):
        ta_env = state["ta_env"]
        ta_env.step(str(self.parser.parse_answer(messages)))
        if ta_env.state.done:
            return [{"role": "user", "content": ta_env.state.game_info[0]["reason"]}]
        _, observation = ta_env.get_observation()
        return [{"role": "user", "content": str(self.feedback_fn(observation))}]
