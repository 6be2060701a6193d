"""Stopping the agent before the verifier runs: every process killed but bwrap's and services'.

    stopped = stop_agent(sandbox.cgroup, sandbox.shell.proc.pid)
    stopped.killed, stopped.services, stopped.netns_fd    # the compartment joins that netns

stop_agent: the agent's cgroup is frozen, every process in it is SIGKILLed except bwrap's own
two (the launcher and the pid-1 init of the agent's pid namespace), the shell protocol's loop
and the bash it runs (the loop's death would end the namespace; the verifier never uses that
shell), and *services*: processes holding a listening TCP or unix socket (Terminal-Bench
tasks check servers the agent left running). Repeated until nothing else is left, so a fork
bomb or a double-forked daemon dies too. Services stay in the agent's namespaces: they never
see what the verifier mounts. When any survive, `pidns_fd` holds the agent's pid namespace:
the compartment runs in it (t1.sandbox.compartment, share_pid), so a test that checks a
service by the pid the agent wrote (`kill -0 $(cat server.pid)`, /proc/PID) finds it. The
agent's other processes are dead by then; the services, root with no capabilities, can
neither ptrace nor open the fds of the verifier's non-dumpable runner and harness.

t1.verify.hardened calls it; t1.sandbox.compartment then runs the verifier beside them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.base import SandboxError
from t1.sandbox.limits import Cgroup

LOOP_PREFIX = "/bin/bash --noprofile --norc -c set -m; while"  # t1.sandbox.shell.outer_loop


@dataclass
class Stopped:
    """What stop_agent did: pids killed, services left running (pid -> command line)."""

    killed: int = 0
    services: dict[int, str] = field(default_factory=dict)
    netns_fd: int | None = None  # an open handle on the agent's network namespace
    pidns_fd: int | None = None  # the agent's pid namespace, when services survive


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode(errors="replace")
            .strip()
        )
    except OSError:
        return ""


def listening_inodes(pid: int) -> set[str]:
    """Socket inodes listening in the network namespace of `pid` (TCP LISTEN, unix listening)."""
    out: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A":
                out.add(parts[9])
    try:
        for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
            parts = line.split()  # Num RefCount Protocol Flags Type St Inode Path
            if len(parts) > 6 and int(parts[3], 16) & 0x10000:  # __SO_ACCEPTCON
                out.add(parts[6])
    except (OSError, ValueError):
        pass
    return out


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets `pid` holds open (its /proc/PID/fd links `socket:[N]`)."""
    out: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _freeze(cg: Cgroup, on: bool) -> None:
    if "v2" in cg.dirs and (cg.dirs["v2"] / "cgroup.freeze").exists():
        (cg.dirs["v2"] / "cgroup.freeze").write_text("1" if on else "0")
    elif "freezer" in cg.dirs:
        (cg.dirs["freezer"] / "freezer.state").write_text("FROZEN" if on else "THAWED")


def stop_agent(cg: Cgroup | None, launcher_pid: int | None, rounds: int = 200) -> Stopped:
    """Kill every process of the agent's cgroup but bwrap's own and the services (see module)."""
    st = Stopped()
    if cg is None or launcher_pid is None:
        return st
    own_net = os.stat("/proc/self/ns/net").st_ino
    for _ in range(rounds):
        try:
            _freeze(cg, True)
        except OSError:
            pass
        pids = cg.pids()
        parent = {p: _ppid(p) for p in pids}
        inner = [p for p in pids if parent[p] == launcher_pid]  # bwrap's pid-1 init
        loops = [p for p in pids if parent[p] in inner and _cmdline(p).startswith(LOOP_PREFIX)]
        keep = {launcher_pid, *inner, *loops, *(p for p in pids if parent[p] in loops)}
        if st.netns_fd is None:
            for p in inner:
                try:
                    if os.stat(f"/proc/{p}/ns/net").st_ino != own_net:
                        st.netns_fd = os.open(f"/proc/{p}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                        break
                except OSError:
                    continue
        # the socket tables only when a process to stop holds a socket (frozen: none opens one
        # now). Reading /proc/PID/net/tcp walks the kernel's whole established-socket hash
        # table whatever the namespace holds: stop_agent took 9.3 ms of host CPU per verifier
        # run with the reads, 1.0 ms without (LOG.md, 2026-12-07)
        held = {p: socket_inodes(p) for p in pids - keep}
        inodes: set[str] = set()
        if inner and any(held.values()):
            inodes = set().union(*(listening_inodes(p) for p in inner))
        victims = []
        for p in sorted(held):
            if held[p] & inodes:
                st.services.setdefault(p, _cmdline(p))
            else:
                victims.append(p)
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            _freeze(cg, False)
        except OSError:
            pass
        if not victims:
            break
        st.killed += len(victims)
        time.sleep(0.01)
    else:
        raise SandboxError(f"agent processes kept appearing after {rounds} kill rounds")
    st.services = {p: c for p, c in st.services.items() if Path(f"/proc/{p}").exists()}
    if st.services and inner:  # the verifier joins it: the tests see them by the agent's pids
        try:
            st.pidns_fd = os.open(f"/proc/{inner[0]}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
    return st
