"""Terminal writes in the order the processes were started, when processes run at once.

    python -I -S .../t1/sandbox/tty_order.py -- bwrap ... bash ...   # tty_order_prefix() + argv

Two processes of one command that write to the terminal at once land in whichever order the
scheduler picks: `catach.txt | grep board to cedar.txt` printed bash's `command not found`
first in one campaign and grep's error first in another, and from that observation on the
two PPO runs differed (LOG.md, the twenty-third session: 71 of 2,400 such pipelines reversed
under load; pinning to one CPU did not help). A terminal shows writes in arrival order, so
under `run.deterministic` the sandbox's terminal writes pass through here.

How. This process installs a seccomp filter on itself (no_new_privs) and forks `argv`, which
inherits it, as does every descendant. The filter sends each write(2), writev(2) and
sendfile(2) to fd 0, 1 or 2 to this process as a user notification (SECCOMP_RET_USER_NOTIF,
Linux >= 5.5); every other system call runs untouched. A write whose fd is not the terminal
(stage 1 of a pipeline writing into the pipe) continues at once. A terminal write from
process P waits while an *older* process of the sandbox (started earlier: /proc start time,
then pid) is runnable (R, D), is itself writing to the terminal (blocked in write(2) on a full
pty), or has a terminal write waiting here. The oldest waiting write goes first. So in
`a | b` whatever `a` prints before it blocks or exits comes before what `b` prints, every
time; a command's own output, with nothing running beside it, passes at once (bash waiting for
its child is asleep, not runnable).

What it does not order: output of a process that runs past its command's end (a background
job printing later lands when it lands), and a write that waited HOLD_MAX_S (an older process
that never sleeps, `while :; do :; done &`).

Being a step of the launch chain, it holds the terminal like the rest (its stdio is the pty)
and exits with `argv`'s exit status; if it fails, it kills `argv`, so the sandbox dies visibly
instead of every write failing with ENOSYS.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import struct
import sys
import time

# per machine: (AUDIT_ARCH_*, seccomp(2)'s number, {write, writev, sendfile})
ARCHES = {
    "x86_64": (0xC000003E, 317, (1, 20, 40)),
    "aarch64": (0xC00000B7, 277, (64, 66, 71)),
}
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
NOTIF_SIZE = 80  # struct seccomp_notif: id, pid, flags, seccomp_data (nr, arch, ip, args[6])
RESP_SIZE = 24  # struct seccomp_notif_resp: id, val, error, flags
IOCTL_RECV = 0xC0000000 | (NOTIF_SIZE << 16) | (ord("!") << 8) | 0
IOCTL_SEND = 0xC0000000 | (RESP_SIZE << 16) | (ord("!") << 8) | 1

POLL_S = 0.0005  # how often waiting writes are re-examined
HOLD_MAX_S = 2.0  # a write never waits longer than this (an older process that never sleeps)
RUNNING = frozenset("RD")
# signal numbers (x86_64 and aarch64 share them): the signal module's import would cost more
# than the rest of this file, and this runs once per sandbox
SIGINT, SIGQUIT, SIGKILL, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGXFSZ = 2, 3, 9, 13, 20, 21, 22, 25
SIG_DFL, SIG_IGN = 0, 1


def tty_order_prefix() -> list[str]:
    """The argv prefix that starts the rest of a launch chain under this module.

    The file runs as a script in isolated mode (`-I -S`): it imports only the standard library,
    so neither the sandbox's environment (PYTHONPATH) nor the current directory matters.
    """
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), "--"]


class Unsupported(RuntimeError):
    """This machine cannot order terminal writes (architecture, kernel, or seccomp refused)."""


def filter_program(arch: str) -> bytes:
    """The classic-BPF seccomp program: notify writes to fds 0-2, allow everything else."""
    if arch not in ARCHES:
        raise Unsupported(f"tty_order: no seccomp program for the {arch} architecture")
    audit, _, (write, writev, sendfile) = ARCHES[arch]
    ld, jeq, jgt, ret = 0x20, 0x15, 0x25, 0x06
    prog = [
        (ld, 0, 0, 4),  # 0: A = arch
        (jeq, 0, 7, audit),  # 1: other ABI -> allow (9)
        (ld, 0, 0, 0),  # 2: A = nr
        (jeq, 2, 0, write),  # 3: -> 6
        (jeq, 1, 0, writev),  # 4: -> 6
        (jeq, 0, 3, sendfile),  # 5: -> 6, else allow (9)
        (ld, 0, 0, 16),  # 6: A = low word of args[0] (the fd)
        (jgt, 1, 0, 2),  # 7: fd > 2 -> allow (9)
        (ret, 0, 0, SECCOMP_RET_USER_NOTIF),  # 8
        (ret, 0, 0, SECCOMP_RET_ALLOW),  # 9
    ]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


def install_filter() -> int:
    """Set no_new_privs and install the filter in this process; return the listener fd."""
    arch = os.uname().machine
    code = filter_program(arch)
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise Unsupported(f"tty_order: prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    buf = ctypes.create_string_buffer(code, len(code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(code) // 8, ctypes.addressof(buf))
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(
        ctypes.c_long(ARCHES[arch][1]),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_NEW_LISTENER),
        ctypes.byref(prog),
    )
    if fd < 0:
        raise Unsupported(f"tty_order: seccomp(NEW_LISTENER): {os.strerror(ctypes.get_errno())}")
    return int(fd)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _set_signals(libc: ctypes.CDLL, action: int, signums: tuple[int, ...]) -> None:
    libc.signal.restype = ctypes.c_void_p
    for n in signums:
        libc.signal(n, ctypes.c_void_p(action))


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of `pid`, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[1]), int(rest[19])


class Orderer:
    """The waiting terminal writes of one sandbox, and the rule that releases them."""

    def __init__(self, listener: int, root: int, tty_rdev: int | None) -> None:
        self.listener, self.root, self.tty_rdev = listener, root, tty_rdev
        self.waiting: dict[int, tuple[tuple[int, int], int, float]] = {}  # id -> key, pid, t0
        # pid -> start time: the sandbox's processes as last scanned
        self.members: dict[int, int] = {}
        self._notif = bytearray(NOTIF_SIZE)
        self._writes = ARCHES[os.uname().machine][2]

    # -- the kernel's side -------------------------------------------------------------------

    def receive(self) -> None:
        """Take one notification: a write to a non-terminal continues, a terminal write waits."""
        self._notif[:] = bytes(NOTIF_SIZE)  # the kernel refuses a struct that is not zeroed
        try:
            fcntl.ioctl(self.listener, IOCTL_RECV, self._notif, True)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):  # the writer was killed
                return
            raise
        nid, pid = struct.unpack_from("QI", self._notif, 0)
        fd = struct.unpack_from("Q", self._notif, 16 + 16)[0] & 0xFFFFFFFF
        if not self._is_tty(pid, fd):
            self.answer(nid)
            return
        st = _stat(pid)
        if st is None:
            self.answer(nid)
            return
        self.waiting[nid] = ((st[2], pid), pid, time.monotonic())

    def answer(self, nid: int) -> None:
        resp = struct.pack("QqiI", nid, 0, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE)
        try:
            fcntl.ioctl(self.listener, IOCTL_SEND, bytearray(resp), True)
        except OSError as e:
            if e.errno != errno.ENOENT:  # ENOENT: the writer was interrupted or killed
                raise

    def _is_tty(self, pid: int, fd: int) -> bool:
        try:
            rdev = os.stat(f"/proc/{pid}/fd/{fd}").st_rdev
        except OSError:
            return False
        if self.tty_rdev is not None:
            return rdev == self.tty_rdev
        return 136 <= os.major(rdev) <= 143  # Unix98 pty slaves

    # -- the rule ----------------------------------------------------------------------------

    def release_ready(self) -> None:
        """Release the oldest waiting write while nothing older runs; then the next, and so on."""
        while self.waiting:
            nid, (key, pid, t0) = min(self.waiting.items(), key=lambda kv: kv[1][0])
            if time.monotonic() - t0 < HOLD_MAX_S and self._older_busy(key, pid):
                return
            del self.waiting[nid]
            self.answer(nid)

    def _older_busy(self, key: tuple[int, int], writer: int) -> bool:
        """True while a process of the sandbox started before `key` runs or writes."""
        tgid = writer if writer in self.members else _tgid(writer)
        if tgid not in self.members:
            # every process older than the writer existed when the writer did: one scan of
            # /proc after the writer's first write finds them all, later writes re-read states
            self.members = self._tree()
        for pid, start in list(self.members.items()):
            if (start, pid) >= key or pid == tgid:
                continue
            st = _stat(pid)
            if st is None or st[2] != start or st[0] == "Z":
                del self.members[pid]
                continue
            if st[0] in RUNNING or self._writing_tty(pid):
                return True
        return False

    def _writing_tty(self, pid: int) -> bool:
        """True while `pid` sleeps inside a write to the terminal (the pty's buffer is full)."""
        try:
            with open(f"/proc/{pid}/syscall", "rb") as f:
                fields = f.read().split()
        except OSError:
            return False
        if len(fields) < 2 or not fields[0].isdigit() or int(fields[0]) not in self._writes:
            return False
        return self._is_tty(pid, int(fields[1], 16))

    def _tree(self) -> dict[int, int]:
        """pid -> start time of every live descendant of the root (and the root)."""
        info: dict[int, tuple[str, int, int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                pid = int(name)
                if pid >= self.root or pid < self.root - (1 << 21):  # later, or pids wrapped
                    st = _stat(pid)
                    if st is not None:
                        info[pid] = st
        member: dict[int, bool] = {self.root: True}

        def inside(pid: int) -> bool:
            chain = []
            while pid not in member:
                st = info.get(pid)
                if st is None or pid <= 1:
                    member[pid] = False
                    break
                chain.append(pid)
                pid = st[1]
            verdict = member[pid]
            for p in chain:
                member[p] = verdict
            return verdict

        return {p: st[2] for p, st in info.items() if inside(p) and st[0] != "Z"}


def _tgid(tid: int) -> int:
    try:
        with open(f"/proc/{tid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return tid


def _tty_rdev() -> int | None:
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.fstat(fd).st_rdev
        except OSError:
            pass
    return None


def run(argv: list[str]) -> int:
    """Start `argv` under the filter and order its terminal writes until it exits.

    The filter is installed in this process and inherited by the child, so the listener never
    has to travel between processes; this process then must not write to fds 0-2 itself (its
    own write would wait for its own answer), so its messages go to a duplicate of stderr.
    """
    err = os.dup(2)  # not inheritable: the sandbox never sees it
    sys.stderr = open(err, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives until exit
    try:
        listener = install_filter()
    except Unsupported as e:
        print(e, file=sys.stderr)
        return 125
    libc = _libc()
    pid = os.fork()
    if pid == 0:
        # Python starts with SIGPIPE and SIGXFSZ ignored, and an ignored signal stays ignored
        # across exec: `yes | head` would print "Broken pipe" instead of dying quietly
        _set_signals(libc, SIG_DFL, (SIGPIPE, SIGXFSZ))
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(err, f"tty_order: {argv[0]}: {e.strerror}\n".encode())
        os._exit(127)
    # the terminal's keys are the sandbox's business: when the job-control loop holds the
    # terminal, ^C or ^Z reaches this process's group too, and must not end the sandbox
    _set_signals(libc, SIG_IGN, (SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU))
    orderer = Orderer(listener, pid, _tty_rdev())
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            timeout = POLL_S if orderer.waiting else None
            ready, _, _ = select.select([listener, pidfd], [], [], timeout)
            if pidfd in ready:
                break
            if listener in ready:
                orderer.receive()
            orderer.release_ready()
    except BaseException:
        os.kill(pid, SIGKILL)  # the sandbox dies visibly rather than every write failing
        raise
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -I -S tty_order.py -- ARGV...", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
