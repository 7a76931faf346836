"""The trainer's torch thread: its work runs in one thread, and the join on the way out survives Ctrl-C."""

import asyncio
import subprocess
import sys
import textwrap
import threading

from vfrl.torch_thread import TorchThread


def test_all_work_runs_in_one_thread_that_is_not_the_loops():
    thread = TorchThread()

    async def names():
        return [await thread.run(lambda: threading.get_ident()) for _ in range(5)]

    idents = asyncio.run(names())
    thread.join()
    assert len(set(idents)) == 1 and idents[0] != threading.get_ident()


# A step in flight when Ctrl-C is pressed twice: the second one lands in the join. Without the join ignoring
# it, Python 3.11 marks the running thread stopped and the interpreter exits without waiting for it (in the
# trainer: a thread inside torch at finalization, exit 134). The step must finish and write its file.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    from vfrl.torch_thread import TorchThread

    # Python's own handler, as in a terminal: a test run started in the background inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out = Path(sys.argv[1])
    started = threading.Event()

    def step():
        started.set()
        time.sleep(1.5)
        out.write_text("step finished")

    thread = TorchThread()
    thread.pool.submit(step)
    started.wait()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()   # lands inside the join
    threading.Timer(0.6, os.kill, (os.getpid(), signal.SIGINT)).start()   # and again
    try:
        thread.join()
    except KeyboardInterrupt:
        print("join interrupted")
    print("alive after join:", [t.name for t in threading.enumerate() if t.name.startswith("torch")])
    print("handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
""")


def test_ctrl_c_during_the_join_neither_breaks_it_nor_ends_the_work(tmp_path):
    out = tmp_path / "step.txt"
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "join interrupted" not in p.stdout
    assert "alive after join: []" in p.stdout
    assert "handler restored: True" in p.stdout
    assert out.read_text() == "step finished"
