"""A verifiers 0.4 environment package whose `vf.Env` pins verifiers' `null` harness on its seat, as verifiers' own
kuhn_poker example pins both players': v1_two_tries' task and turns (the word, then a second word), played by one
interaction. Written only against `verifiers.v1`'s public API, no vfrl import.
"""

import verifiers.v1 as vf
from v1_two_tries import TwoTriesTaskset


class PinnedNullConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})


class PinnedNullEnv(vf.Env[PinnedNullConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            if not (await chat.turn()).terminated:
                await chat.turn(task.data.second)


__all__ = ["TwoTriesTaskset", "PinnedNullEnv"]
