"""inference.port = 0: vLLM binds the port, vf-vllm finds it and writes it, the trainer reads it
(inference/served_port.py, trainer/inference_watch.py's own_server_url). Here with sockets of this process and a
stand-in vf-vllm; with the real server in test_concurrent_runs.py and every port-0 run of the suite."""

import os
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from vfrl.inference.served_port import ServedPort, binds, listening_ports, read_port, write_port
from vfrl.run_dir import RunDir
from vfrl.trainer.inference_watch import InferenceLost, own_server_url


def test_a_bound_socket_is_found_once_it_listens_and_only_on_the_host_it_was_given():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert listening_ports(os.getpid(), "127.0.0.1") == []  # bound, not listening: vLLM before it serves
        s.listen()
        assert listening_ports(os.getpid(), "127.0.0.1") == [port]
        assert listening_ports(os.getpid(), "0.0.0.0") == [port]  # a wildcard bind: any address it listens on
        assert listening_ports(os.getpid(), "127.0.0.2") == []  # another address's socket is not the server's
    assert binds("::1", "::1") and not binds("10.0.0.1", "10.0.0.2") and binds("10.0.0.1", "myhost")


def test_a_gone_process_has_no_port():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert listening_ports(proc.pid, "127.0.0.1") == []


def test_served_port_writes_the_port_once_and_a_restart_keeps_it(tmp_path):
    said = []
    port_file = tmp_path / "inference.port"
    write_port(port_file, 1)  # an earlier server's
    served = ServedPort("127.0.0.1", 0, port_file, say=lambda line, **_: said.append(line))
    assert not port_file.exists()  # removed at start: the trainer never reads the last server's port
    argv = ["python", "-m", "vllm", "--host", "127.0.0.1", "--port", "0", "--api-key-x"]
    assert served.argv(argv) == argv
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert served.health_url(os.getpid()) is None and read_port(port_file) is None
        s.listen()
        port = s.getsockname()[1]
        urls = set()
        threads = [threading.Thread(target=lambda: urls.add(served.health_url(os.getpid()))) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    assert urls == {f"http://127.0.0.1:{port}/health"} and read_port(port_file) == port
    assert said == [f"vf-vllm: vLLM listens on port {port}"]  # once, though two threads ask
    assert served.argv(argv) == ["python", "-m", "vllm", "--host", "127.0.0.1", "--port", str(port), "--api-key-x"]


def test_a_configured_port_is_the_servers_only_once_the_server_itself_listens_on_it(tmp_path):
    """Another process on the configured port (it bound it first) answers /health there: not this server's."""
    other = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                              "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        held = int(other.stdout.readline())
        assert ServedPort("127.0.0.1", held, None).health_url(os.getpid()) is None
        assert ServedPort("127.0.0.1", held, None).health_url(other.pid) == f"http://127.0.0.1:{held}/health"
    finally:
        other.kill()
        other.wait()
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        fixed = ServedPort("0.0.0.0", s.getsockname()[1], tmp_path / "other.port")
        assert fixed.health_url(os.getpid()) == f"http://127.0.0.1:{s.getsockname()[1]}/health"
    assert not (tmp_path / "other.port").exists()  # a configured port is not written


def test_the_trainer_reads_the_port_vf_vllm_wrote(tmp_path):
    paths = RunDir(tmp_path)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        paths.inference_pid.write_text(str(server.pid))
        threading.Timer(1.0, write_port, (paths.inference_port, 41234)).start()
        t0 = time.time()
        url = own_server_url(SimpleNamespace(port=0, host="0.0.0.0", url="unused"), paths, timeout=30)
        assert url == "http://127.0.0.1:41234/v1" and time.time() - t0 >= 0.9
        configured = SimpleNamespace(port=8000, host="127.0.0.1", url="http://127.0.0.1:8000/v1")
        assert own_server_url(configured, paths, timeout=0) == "http://127.0.0.1:8000/v1"  # not read from the file
    finally:
        server.kill()
        server.wait()


def test_the_trainer_stops_in_one_line_when_the_server_exits_before_it_listens(tmp_path):
    paths = RunDir(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    paths.inference_pid.write_text(str(gone.pid))
    with pytest.raises(InferenceLost, match=f"the vLLM server \\(pid {gone.pid}\\) exited during start-up"):
        own_server_url(SimpleNamespace(port=0, host="127.0.0.1"), paths, timeout=30)
    paths.inference_pid.unlink()
    with pytest.raises(InferenceLost, match="did not listen within 1s of starting"):
        own_server_url(SimpleNamespace(port=0, host="127.0.0.1"), paths, timeout=1)
