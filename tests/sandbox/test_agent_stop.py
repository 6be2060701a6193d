"""stop_agent on a real bwrap sandbox: who dies, who stays a service, and when the socket tables
are read at all.

.venv/bin/pytest tests/sandbox/test_agent_stop.py -m integration -q
"""

from __future__ import annotations

import os
import time

import pytest
from shared_fixtures import requires_root_bwrap

from t1.sandbox import SandboxSpec, agent_stop, open_sandbox

pytestmark = [pytest.mark.integration, requires_root_bwrap]

# each runs in the background of the agent's shell and says it is ready by a file in /app
UNIX_LISTENER = (
    "import socket, time; s = socket.socket(socket.AF_UNIX); s.bind('/tmp/svc.sock'); "
    "s.listen(); open('/app/listening', 'w').close(); time.sleep(600)"
)
SOCKETPAIR = (  # holds sockets, none of them listening: not a service
    "import socket, time; a, b = socket.socketpair(); open('/app/paired', 'w').close(); "
    "time.sleep(600)"
)


def _start(sb, script: str, ready: str) -> None:
    sb.exec(f'nohup python3 -c "{script}" >/dev/null 2>&1 &')
    for _ in range(200):
        if sb.exec(f"test -e /app/{ready} && echo ok").output.strip() == "ok":
            return
        time.sleep(0.05)
    raise AssertionError(f"the background process never wrote /app/{ready}")


def _stop(sb, monkeypatch):
    reads: list[int] = []
    real = agent_stop.listening_inodes

    def counted(pid: int) -> set[str]:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(agent_stop, "listening_inodes", counted)
    stopped = agent_stop.stop_agent(sb.cgroup, sb.shell.proc.pid)
    for fd in (stopped.netns_fd, stopped.pidns_fd):
        if fd is not None:
            os.close(fd)
    return stopped, reads


@pytest.fixture
def sb(tmp_path):
    with open_sandbox(SandboxSpec(host_workdir=tmp_path / "work", logs_dir=tmp_path / "logs")) as s:
        yield s


def test_listener_stays_socket_holder_and_sleeper_die(sb, monkeypatch):
    _start(sb, UNIX_LISTENER, "listening")
    _start(sb, SOCKETPAIR, "paired")
    sb.exec("nohup sleep 600 >/dev/null 2>&1 &")
    stopped, reads = _stop(sb, monkeypatch)
    assert reads, "a process held sockets: the listening tables must be read"
    assert len(stopped.services) == 1, stopped.services
    assert "svc.sock" in next(iter(stopped.services.values()))
    assert stopped.killed >= 2  # the socketpair holder and the sleeper (nohup may fork a shell)
    assert stopped.pidns_fd is not None  # a service survived: the verifier joins its pid ns
    left = agent_stop._cmdline  # noqa: SLF001 - the same reader stop_agent uses
    alive = [p for p in sb.cgroup.pids() if "sleep 600" in left(p) or "socketpair" in left(p)]
    assert alive == []


def test_no_socket_no_table_reads(sb, monkeypatch):
    """Reading /proc/PID/net/tcp walks the kernel's whole socket hash table: skipped while no
    process to stop holds any socket, which is every family task's case."""
    sb.exec("nohup sleep 600 >/dev/null 2>&1 &")
    stopped, reads = _stop(sb, monkeypatch)
    assert reads == [] and stopped.services == {} and stopped.killed >= 1
    assert stopped.pidns_fd is None
