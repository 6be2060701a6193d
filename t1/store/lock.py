"""One writer per output, and no orphans: output locks, parent-death signals, pid files.

    from t1.store.lock import hold_output, die_with_parent, PidFile
    lock = hold_output("results/tiny/sft/model", "t1 train --stage sft")  # held until exit
    subprocess.Popen(cmd, preexec_fn=die_with_parent)     # SIGKILL when this process dies
    pids = PidFile("results/tiny/ppo/iter_00001/segment.children.json")
    pids.reap()                  # kill what a previous attempt left (still that program?)
    pids.add("train", proc.pid)  # record a child: pid, start time, command line
    proc = pids.spawn("train", cmd, start_new_session=True)  # recorded before it runs

`hold_output(DIR)` takes an exclusive `flock` on `DIR/.t1-writer.lock` and writes the holder
(pid, host, command line, since) into it. The descriptor is inheritable, so the processes
this one starts hold the lock too (an orphaned child keeps the output locked; the kernel
drops the lock when the last holder dies, whatever killed it). A second writer waits up to
`wait_s` and then raises `LockHeld`, whose message names the directory and the holder's pid.

`die_with_parent` (a `preexec_fn`) sets PR_SET_PDEATHSIG=SIGKILL in the child, so a child
dies with the process that started it even when that one is SIGKILLed (Linux only).

`PidFile` records children as {name: {pid, start, cmdline, pgid}}; `reap()` kills (SIGKILL to
the process group when the child leads one, else to the pid) every recorded process that is
still the same program: same /proc/PID/stat start time and same command line, so a recycled
pid is never hit. A group whose leader is gone but whose members live on (a trainer orphaned
when its driver died) is killed too: while any member lives the kernel does not reuse the
group's number. It returns what it killed. `spawn` closes the window between Popen's return
and `add`: the child waits at a gate until its record is on disk, so a driver SIGKILLed in
between leaves a child that never ran, not a grandchild no file names.

Tests: tests/test_lock.py (real processes), tests/train/test_one_writer.py (two `t1 train
--stage sft` on one output), tests/test_supervise.py (a new supervisor reaps a killed one's
orphans).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic

LOCK_NAME = ".t1-writer.lock"
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class LockHeld(RuntimeError):
    """Another process writes this output; the message names it."""


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when its parent dies (only a C call: fork-safe)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# SIG_DFL for these in a sandbox shell's process before it execs: a job started in the
# background of a script (`snakemake ... &`, `nohup ... &`) ignores SIGINT and SIGQUIT, and every
# process below it inherits that. An interactive bash that starts with SIGINT ignored does not
# honour `trap ... INT`, and every command it runs would also ignore the ^C of a timeout: the
# agent's terminal behaved differently depending on how the campaign was started (2026-12-05).
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)
_libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
_libc.signal.restype = ctypes.c_void_p


def default_terminal_signals() -> None:
    """preexec_fn: TERMINAL_SIGNALS to their default action (C calls only: safe in a child
    forked from a threaded process, where Python's signal.signal is not)."""
    for sig in TERMINAL_SIGNALS:
        _libc.signal(int(sig), None)  # SIG_DFL is the null handler


def terminal_signals_reset():
    """The preexec_fn a sandbox shell needs: default_terminal_signals while this process ignores
    a TERMINAL_SIGNAL (or cannot tell), else None. A handled signal is reset by the exec itself;
    only an ignored one survives it. And any preexec_fn makes subprocess fork where it would
    vfork: ~20 ms of wall and CPU per start from the engine's ~0.5 GB process against 0.5 ms
    (one sandbox per trajectory; LOG.md, 2026-12-06)."""
    for sig in TERMINAL_SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_IGN, None):
            return default_terminal_signals
    return None


def proc_start(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def identity(pid: int) -> dict[str, Any]:
    return {"pid": pid, "start": proc_start(pid), "cmdline": proc_cmdline(pid)}


def same_process(record: dict[str, Any]) -> bool:
    """Is the process of `record` (from `identity`) still alive and still that program?"""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = proc_start(pid)
    return (
        start is not None
        and start == record.get("start")
        and (proc_cmdline(pid) == record.get("cmdline"))
    )


class OutputLock:
    """An exclusive flock on DIR/.t1-writer.lock, held while the descriptor is open."""

    def __init__(self, directory: str | os.PathLike[str], what: str = "") -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOCK_NAME
        self.what = what or " ".join(sys.argv)
        self._fd: int | None = None

    def holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self, wait_s: float = 0.0, inherit: bool = True) -> OutputLock:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    h = self.holder()
                    alive = (
                        "alive"
                        if h.get("pid") and same_process(h)
                        else "exited; a child it started still holds the lock"
                    )
                    raise LockHeld(
                        f"{self.dir}: another writer holds {self.path}: pid {h.get('pid', '?')} "
                        f"on {h.get('host', '?')} ({alive}), running {h.get('what', '?')!r} since "
                        f"{time.ctime(h['since']) if h.get('since') else '?'}; wait for it to "
                        f"finish or kill it, then rerun"
                    ) from None
                time.sleep(0.2)
        os.set_inheritable(fd, inherit)
        record = {**identity(os.getpid()), "host": socket.gethostname(), "what": self.what,
                  "since": time.time()}  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def hold_output(
    directory: str | os.PathLike[str], what: str = "", wait_s: float = 0.0, inherit: bool = True
) -> OutputLock:
    """Lock DIR for the rest of this process's life (and, with `inherit`, its children's: a
    driver that reaps its children on start passes False, so a dead driver's orphans do not
    keep it out). Idempotent within a process (a stage run twice in one process, as tests
    do, keeps the one lock it has)."""
    key = str(Path(directory).resolve())
    if key not in _HELD:
        _HELD[key] = OutputLock(directory, what).acquire(wait_s, inherit)
    return _HELD[key]


def release_output(directory: str | os.PathLike[str]) -> bool:
    """Give up the lock `hold_output` took on DIR in this process (a stage run in-process, as
    tests do, whose output another process is to write next). True when one was held."""
    held = _HELD.pop(str(Path(directory).resolve()), None)
    if held is not None:
        held.release()
    return held is not None


_HELD: dict[str, OutputLock] = {}


def forget_inherited_locks() -> None:
    """In a child forked without exec (t1.run.warm_start): close its copies of the parent's
    lock descriptors (the parent's flocks stay held by the parent's own) and forget them, so
    the child neither keeps a lock past its parent nor thinks it holds one."""
    for held in _HELD.values():
        held.release()
    _HELD.clear()


# The gate of PidFile.spawn: wait for the driver's go on fd $1 (exit if it died first), close
# it, exec the command. bash, not sh: dash redirects only fds 0-9.
_GATE = 'g=$1; shift; read -r -u "$g" _ || exit 125; exec {g}<&-; exec "$@"'


class PidFile:
    """Children of one driver, recorded so that the next attempt can kill what this one left."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self.path.read_text()).get("children", {})
        except (OSError, ValueError, AttributeError):
            return {}

    def add(self, name: str, pid: int) -> None:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            return
        self._record(name, {**identity(pid), "pgid": pgid})

    def _record(self, name: str, rec: dict[str, Any]) -> None:
        children = self.read()
        children[name] = rec
        write_json_atomic(self.path, {"children": children})

    def spawn(self, name: str, cmd: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """subprocess.Popen(cmd, **popen), recorded before `cmd` runs.

        Popen returns after the exec; a driver SIGKILLed before its `add` would leave a child
        no file names, and whatever that child had started in the meantime (a grandchild in
        its group outlives the child's parent-death signal) would escape the next attempt's
        `reap`. So the child first waits behind a gate (bash reading a pipe; it exits if the
        driver dies first), is recorded under the command it is about to exec, and only then
        execs it. A command that is not there raises FileNotFoundError here, as Popen would.
        """
        prog = cmd[0]
        where = os.path.join(popen.get("cwd") or "", prog) if os.sep in prog else prog
        if shutil.which(where, path=(popen.get("env") or os.environ).get("PATH")) is None:
            raise FileNotFoundError(errno.ENOENT, f"no such program: {prog}", prog)
        gate_r, gate_w = os.pipe()
        try:
            proc = subprocess.Popen(
                ["bash", "-c", _GATE, "t1-gate", str(gate_r), *cmd],
                pass_fds=(*popen.pop("pass_fds", ()), gate_r),
                **popen,
            )
        except BaseException:
            os.close(gate_w)
            raise
        finally:
            os.close(gate_r)
        try:
            pgid = os.getpgid(proc.pid)
            rec = {"pid": proc.pid, "start": proc_start(proc.pid), "cmdline": list(cmd)}
            self._record(name, {**rec, "pgid": pgid})
            os.write(gate_w, b"go\n")
        except (ProcessLookupError, BrokenPipeError):
            pass  # the gate is gone: the child died before it ran anything
        finally:
            os.close(gate_w)
        return proc

    def remove(self, name: str) -> None:
        children = self.read()
        if children.pop(name, None) is not None:
            write_json_atomic(self.path, {"children": children})

    def reap(self, grace_s: float = 5.0) -> list[dict[str, Any]]:
        """SIGKILL what the recorded children left: a child that is still the same program (its
        process group when it leads one), and the members of a group whose leader is gone (no
        process has that pid, so the group number cannot have been reused). Waits up to
        grace_s for them to go, then forgets them. Returns what was killed."""
        killed = []
        mine = {os.getpid(), os.getppid(), os.getpgrp()}  # never this process, its parent or group
        for name, rec in self.read().items():
            pid = rec["pid"]
            if pid in mine:
                continue
            leads = rec.get("pgid") == pid and pid not in mine
            if same_process(rec):
                target = "group" if leads else "pid"
            elif leads and proc_start(pid) in (None, rec.get("start")) and group_members(pid):
                target = "group"  # the leader died (gone, or its unreaped zombie), its group not
            else:
                continue
            try:
                os.killpg(pid, signal.SIGKILL) if target == "group" else os.kill(
                    pid, signal.SIGKILL
                )
            except (ProcessLookupError, PermissionError):
                continue
            killed.append({"name": name, "target": target, **rec})

        def left() -> bool:
            return any(
                same_process(k) or (k["target"] == "group" and group_members(k["pid"]))
                for k in killed
            )

        deadline = time.monotonic() + grace_s
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.path.exists():
            write_json_atomic(self.path, {"children": {}})
        return killed


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(d))
    return out
