"""Four `vf-rl` runs started at the same moment on one machine (port 0, one tmux server): each reaches its own vLLM
and trains, and none reaches another's (issue 62, item 4).

The race this guards against: a port picked free at launch and released, then taken by another run's server before
this run's vLLM binds it. That server answers /health for this run and refuses its key (a run under load met
401 Unauthorized on its first request). Here every run's port gets a stand-in 'other server' the moment the run's
config names one, as fast as a rival can be; with port 0 left to vLLM there is none to take.
"""

import http.server
import subprocess
import threading
import time
import tomllib
from pathlib import Path

import pytest

from conftest import BIN, tmux_socket, write_config
from vfrl.inference.served_port import read_port
from vfrl.run_dir import RunDir, read_jsonl

pytestmark = pytest.mark.e2e
RUNS = 4


class OtherServer(http.server.BaseHTTPRequestHandler):
    """Another run's vLLM: /health open, every other path 401 without its key."""

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 401)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *_):
        pass


def squat(config: Path, deadline: float, taken: list) -> None:
    """Bind a stand-in server on the port the run's resolved config names, as soon as it is written."""
    while not config.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        port = tomllib.loads(config.read_text())["inference"]["port"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return
    if port:
        try:
            server = http.server.HTTPServer(("127.0.0.1", port), OtherServer)
        except OSError:  # vLLM bound it first
            return
        taken.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()


def test_four_runs_started_at_once_each_train_against_their_own_server(tmp_path, tiny_model):
    socket_name = tmux_socket("concurrent", tmp_path)
    taken: list = []
    runs = []
    try:
        for i in range(RUNS):
            cfg = write_config(tmp_path / f"cfg{i}.toml", tiny_model, port=0, output_dir=tmp_path / "outputs",
                               run_name=f"run{i}", max_steps=1, batch_size=8, rollouts_per_example=4, max_tokens=6)
            runs.append((cfg, tmp_path / "outputs" / f"run{i}"))
        deadline = time.monotonic() + 120
        squatters = [threading.Thread(target=squat, args=(RunDir(run_dir).config, deadline, taken), daemon=True)
                     for _, run_dir in runs]
        for thread in squatters:
            thread.start()
        outs = [open(tmp_path / f"vf-rl{i}.out", "w+") for i in range(RUNS)]
        procs = [subprocess.Popen([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
                 for (cfg, _), out in zip(runs, outs)]
        codes = [proc.wait(timeout=900) for proc in procs]
        logs = []
        for out in outs:
            out.seek(0)
            logs.append(out.read())
            out.close()
        assert not taken, f"{len(taken)} run(s) named a port another server could take before vLLM bound it"
        assert codes == [0] * RUNS, "\n\n".join(log[-2000:] for log in logs)
        ports = []
        for (_, run_dir), log in zip(runs, logs):
            paths = RunDir(run_dir)
            assert paths.exit_code("trainer").read_text().strip() == "0"
            assert len([r for r in read_jsonl(paths.metrics) if "loss" in r]) == 1, log[-2000:]
            port = read_port(paths.inference_port)
            inference_log = paths.log("inference").read_text()
            assert port and f"vf-vllm: vLLM listens on port {port}" in inference_log, inference_log[-2000:]
            assert "401" not in paths.log("trainer").read_text()
            ports.append(port)
        assert len(set(ports)) == RUNS, ports  # four servers, each on a port of its own
    finally:
        for server in taken:
            server.shutdown()
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
