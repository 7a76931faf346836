"""inference.port = 0: vLLM binds a free port itself, and the run learns which from the run directory.

A port picked free by one process and released for another to bind can be taken in between (another run's
vLLM bound it first, answered /health for this run and 401 to its requests). Bound by vLLM with port 0, the
port is held from the bind until the server exits: nothing can take it. vf-vllm finds it once the server
listens (the API server's listening socket on the host it was given), says it in its log, writes it to the
run's inference.port and starts a restarted server on that same port; the trainer reads it there.

Whatever the port, vf-vllm counts its server as serving only once that server's own process listens on it: a
/health answered by another process on a configured port is not its server's.
"""

from __future__ import annotations

import ipaddress
import os
import threading
from pathlib import Path

from vfrl.inference.endpoints import client_host


def listening_ports(pid: int, host: str) -> list[int]:
    """The TCP ports process `pid` listens on at `host` (a wildcard host: any address), lowest first; none before
    it listens, or when it is gone."""
    import psutil

    try:
        sockets = psutil.Process(pid).net_connections(kind="inet")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return sorted({s.laddr.port for s in sockets if s.status == psutil.CONN_LISTEN and binds(s.laddr.ip, host)})


def binds(address: str, host: str) -> bool:
    """Is a socket bound to `address` one that a server told to bind `host` made?"""
    if host in ("", "0.0.0.0", "::"):
        return True
    try:
        return ipaddress.ip_address(address) == ipaddress.ip_address(host)
    except ValueError:  # a host name: vLLM bound what it resolved to
        return True


def read_port(port_file: Path) -> int | None:
    """The port vf-vllm wrote for the run's server; None before it has."""
    try:
        return int(port_file.read_text())
    except (OSError, ValueError):
        return None


def write_port(port_file: Path, port: int) -> None:
    """Whole or not at all: the trainer polls the file."""
    part = port_file.with_name(port_file.name + ".part")
    part.write_text(str(port))
    os.replace(part, port_file)


class ServedPort:
    """The port of vf-vllm's server: the configured one, or (0) the one vLLM bound, found once it listens."""

    def __init__(self, host: str, port: int, port_file: Path | None, say=print):
        self.host, self.port, self.port_file, self.say = host, port, port_file, say
        self.finding = threading.Lock()  # asked by the supervisor's loop and by cpu_cores' thread
        if port == 0 and port_file is not None:
            port_file.unlink(missing_ok=True)  # an earlier server's (a resumed run's directory)

    def health_url(self, pid: int) -> str | None:
        """The server's /health once server `pid` listens on its port (another process's /health there is not
        its own: one that held a configured port first); None before."""
        with self.finding:
            listening = listening_ports(pid, self.host)
            if self.port == 0:
                if not listening:
                    return None
                self.port = listening[0]
                self.say(f"vf-vllm: vLLM listens on port {self.port}", flush=True)
                if self.port_file is not None:
                    write_port(self.port_file, self.port)
            elif self.port not in listening:
                return None
        return f"http://{client_host(self.host)}:{self.port}/health"

    def argv(self, argv: list[str]) -> list[str]:
        """The server command with the port it serves on (a restart keeps the port the run's clients know)."""
        if self.port == 0 or "--port" not in argv:
            return argv
        at = argv.index("--port") + 1
        return [*argv[:at], str(self.port), *argv[at + 1:]]
