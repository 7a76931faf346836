"""wordle: guess a secret 5-letter word; after each guess the game marks every letter.

Marks: `G` right letter in the right place, `Y` in the word but elsewhere, `-` not in the word
(a letter guessed twice is marked Y only as often as the secret has it left over). The last
5-letter word of a reply is the guess; a reply without one is told so and costs a turn.

Reward: `solved` (1.0) + 0.5 x `efficiency` ((7 - guesses used) / 6 when solved) + 0.2 x
`best_guess` ((greens + yellows / 2) / 5 of the best guess): partial credit for close guesses.
"""

import random
import re

import vfrl

WORDS = """apple baker brick chair chess clock cloud crane dance drink eagle earth flame fruit ghost glass grape
green heart horse house juice knife lemon light mango maple money mouse music night ocean paper peach pearl piano
pilot plant plate radio river robot salad sheep shirt smile snake sound spoon stone storm sugar table tiger toast
tower train water whale wheat world zebra bread candy coral delta flute grass honey lunch medal nurse olive queen
rainy scarf sword thumb vivid yacht""".split()
SYSTEM_PROMPT = "Guess the 5-letter word. G: right spot, Y: wrong spot, -: absent."
MAX_GUESSES = 6


def marks(guess: str, secret: str) -> str:
    result = ["-"] * 5
    left = [s for g, s in zip(guess, secret) if g != s]  # secret letters not matched in place
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            result[i] = "G"
        elif g in left:
            result[i] = "Y"
            left.remove(g)
    return "".join(result)


def guess_of(text: str) -> str | None:
    words = re.findall(r"(?<![A-Za-z])[A-Za-z]{5}(?![A-Za-z])", text or "")
    return words[-1].lower() if words else None


def guesses(completion) -> list[str]:
    return [g for m in completion if m["role"] == "assistant" and (g := guess_of(m["content"]))]


def solved(completion, answer) -> float:
    return float(answer in guesses(completion))


def efficiency(completion, answer) -> float:
    made = [m for m in completion if m["role"] == "assistant"]
    turns = next((i + 1 for i, m in enumerate(made) if guess_of(m["content"]) == answer), None)
    return 0.0 if turns is None else (MAX_GUESSES + 1 - turns) / MAX_GUESSES


def best_guess(completion, answer) -> float:
    scores = [(m.count("G") + m.count("Y") / 2) / 5 for m in map(lambda g: marks(g, answer), guesses(completion))]
    return max(scores, default=0.0)


class WordleEnv(vfrl.MultiTurnEnv):
    def is_completed(self, messages, state) -> bool:
        return (bool(messages) and messages[-1]["role"] == "assistant"
                and guess_of(messages[-1]["content"]) == state["answer"])

    def env_response(self, messages, state):
        guess = guess_of(messages[-1]["content"])
        left = self.max_turns - state["turn"]
        if guess is None:
            return [{"role": "user", "content": f"Reply with a 5-letter word. {left} left."}]
        return [{"role": "user", "content": f"{guess} {marks(guess, state['answer'])} {left} left."}]


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, seed: int = 0) -> vfrl.MultiTurnEnv:
    def rows(n: int, seed: int) -> list[dict]:
        rng = random.Random(seed)
        return [{"question": "Guess.", "answer": rng.choice(WORDS), "task": "wordle"} for _ in range(n)]

    return WordleEnv(
        dataset=rows(num_train_examples, seed),
        eval_dataset=rows(num_eval_examples, seed + 1),
        system_prompt=SYSTEM_PROMPT,
        rubric=vfrl.Rubric(funcs=[solved, efficiency, best_guess], weights=[1.0, 0.5, 0.2]),
        max_turns=MAX_GUESSES,
        env_id="wordle",
    )
