"""`python -m vfrl.inference.reaper PGID PARENT`: end process group PGID once process PARENT is gone.

vf-vllm (supervisor.py) ends its server's group itself however the server ends; this covers vf-vllm's own
death (kill -9, the OOM killer, a SIGKILL to the pane's whole group), after which nothing would. It runs as
vf-vllm's child in a session of its own, so what is sent to the pane's group does not reach it (and it ignores
the hang-up and stop signals anyway: vf-vllm handles those and ends the server), and notices its parent is
gone when it is given another parent. After vf-vllm's own clean exit the group is already empty and it exits
at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from vfrl.inference.supervisor import end_group
from vfrl.proc_table import group_members


def main(pgid: int, parent: int, poll: float = 0.25) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    while os.getppid() == parent:
        time.sleep(poll)
    if group_members(pgid):
        left = end_group(pgid, linger=0, grace=3)
        print(f"vf-vllm (pid {parent}) is gone; its reaper ended the {len(left)} vLLM process(es) it left: "
              + ", ".join(map(str, left)), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
