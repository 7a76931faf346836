"""A Wordle package written against verifiers' classic API only, as a verifiers 0.3 user wrote one on
TextArenaEnv: verifiers' module paths, no vfrl import. Not a copy of verifiers' wordle package: the guess goes
in `<guess>[word]</guess>`, the reward is 1 for a solve plus a bonus for solving in fewer guesses, and the
feedback turn is the game's latest message alone."""

import verifiers as vf
from verifiers.envs.integrations.textarena_env import TextArenaEnv

SYSTEM_PROMPT = "Play Wordle. Reply with your guess as <guess>[word]</guess>."


def latest_game_message(observation: str) -> str:
    return observation.split("[GAME]")[-1].strip()


def load_environment(num_train_examples: int = 4, num_eval_examples: int = 2, seed: int = 0, **kwargs):
    parser = vf.XMLParser(fields=["guess"], answer_field="guess")

    def solved(parser, completion, answer) -> float:
        return float(parser.parse_answer(completion) == f"[{answer}]")

    def fewer_guesses(parser, completion, answer) -> float:
        return solved(parser, completion, answer) / len(parser.get_assistant_messages(completion))

    rubric = vf.Rubric(funcs=[solved, fewer_guesses, parser.get_format_reward_func()], weights=[1.0, 0.5, 0.0],
                       parser=parser)
    return TextArenaEnv(game="Wordle-v0", num_train_examples=num_train_examples, num_eval_examples=num_eval_examples,
                        system_prompt=SYSTEM_PROMPT, parser=parser, rubric=rubric, feedback_fn=latest_game_message,
                        seed=seed, **kwargs)
