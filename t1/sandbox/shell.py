"""A persistent bash over a pty, driven by sentinels: the shell protocol of every sandbox backend.

    sh = PtyShell(argv, ctl_dir=host_dir, ctl_inside="/run/t1", cap=65536)
    sh.start()                           # runs argv (e.g. bwrap ... sh -c LOOP), waits for "ready"
    r = sh.exec("cd /app && ls", timeout=10)
    sh.close()

Protocol. The backend starts `outer_loop(...)` inside the sandbox: a `sh` loop that (re)starts
`bash --noediting --noprofile --rcfile RC -i` and, when bash exits, prints an exit sentinel with
its status. The pty starts with echo and
onlcr off (what `stty -echo -onlcr` would do, without its exec). RC (written here into the
control dir, which the sandbox sees read-only at `ctl_inside`) sets `TERM=dumb`, empty prompts, no history expansion, and
defines `__t1_run N`, which sources `cmd.N` (so cwd, variables and background jobs persist)
and prints `\\n<RS>T1-<nonce>-C<N>-<rc><RS>\\n`. The nonce is random per shell, so command
output cannot forge a sentinel by accident. Commands travel as files, never as typed text, so
long lines and heredocs are not mangled by the terminal's line discipline.

Timeout: ^C is written to the pty (SIGINT to the foreground process group; bash runs with job
control, so background jobs are spared); once bash holds the terminal again, a sync line asks
for a fresh sentinel (up to SYNC_TRIES lines: a dying job may swallow one). If none comes, the
foreground process group is SIGKILLed; if the shell itself is stuck, bash is killed, the loop
restarts it, and the result says so. Exit code 124, `timed_out=True`. The same command times
out with the same observation whatever the machine's load.

Output is capped while it is read: the first half of the cap is kept, then only a rolling tail,
so endless output (`yes`) never grows memory; the cut is marked `[... N bytes cut ...]`.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import signal
import subprocess
import termios
import time
from dataclasses import dataclass
from pathlib import Path

from t1.sandbox.base import ExecResult, SandboxError
from t1.store.lock import terminal_signals_reset

RS = b"\x1e"
SENTINEL_MAX = 128  # longest sentinel, bytes; a partial one may hide in this many tail bytes
RESTART_NOTE = (
    "\n[t1: the shell exited and was restarted: cwd, variables and functions were reset]\n"
)
INTERRUPT_GRACE_S = 1.0
SYNC_TRIES = 3  # sync lines sent after an interrupt before the next, harder, step


def rc_text(nonce: str, ctl_inside: str) -> str:
    """The bash rc file that turns an interactive bash into the sentinel protocol."""
    return f"""\
export TERM=dumb
PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''
export VIRTUAL_ENV_DISABLE_PROMPT=1  # `source venv/bin/activate` must not bring a prompt back
unset HISTFILE; set +o history; set +H
__t1_mark() {{ printf '\\n\\036T1-%s-%s-%s\\036\\n' '{nonce}' "$1" "$2"; }}
__t1_run() {{ local __t1_n=$1; shift; . "{ctl_inside}/cmd.$__t1_n"; __t1_mark "C$__t1_n" "$?"; }}
cd "${{T1_WORKDIR:-/}}" 2>/dev/null
__t1_mark R 0
"""


def outer_loop(nonce: str, ctl_inside: str) -> list[str]:
    """argv of the in-sandbox loop that keeps a bash running and reports each exit.

    The loop is itself a bash with job control (`set -m`), so when the inner bash dies (even
    by SIGKILL while it owned the terminal) the loop takes the terminal back and the next
    inner bash can own it again; a plain `sh` loop would leave a dead foreground group.
    """
    script = (
        "set -m; while :; do "
        f"bash --noediting --noprofile --rcfile {ctl_inside}/rc -i; "
        f"printf '\\n\\036T1-{nonce}-X-%s\\036\\n' $?; sleep 0.05; "
        "done"
    )
    return ["/bin/bash", "--noprofile", "--norc", "-c", script]


SENTINEL = re.compile(rb"\r?\n?\x1eT1-([0-9a-f]{1,64})-([CSRX])(\d*)-(-?\d+)\x1e\r?\n")


def find_sentinel(buf: bytes | bytearray, nonce: bytes) -> tuple[re.Match[bytes] | None, int]:
    """The first sentinel of the shell with `nonce` in `buf`, and where the output before it ends.

    Kinds: C<n> (command n done), S<n> (sync), R (ready), X (the shell exited). A sentinel
    with another nonce is plain output (forged, or printed from a log). One regex for all
    shells: compiling one per nonce cost more than the rest of the protocol.
    """
    pos = 0
    while True:
        m = SENTINEL.search(buf, pos)
        if m is None or m.group(1) == nonce:
            return m, (m.start() if m else len(buf))
        pos = m.end()


class CappedOutput:
    """Keeps the first `cap // 2` bytes and a rolling tail of the rest; memory stays O(cap)."""

    def __init__(self, cap: int) -> None:
        self.head_cap = max(cap // 2, 0)
        self.tail_cap = max(cap - self.head_cap, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if self.cut <= 0:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        return (
            bytes(self.head).decode("utf-8", "replace")
            + f"\n[... {self.cut} bytes cut ...]\n"
            + bytes(self.tail).decode("utf-8", "replace")
        )


@dataclass
class _Hit:
    kind: str  # C, S, R or X
    seq: str
    code: int


class PtyShell:
    """One persistent bash behind a pty; `argv` starts the sandbox and runs `outer_loop` in it.

    ctl_dir: host directory the sandbox sees (read-only) at `ctl_inside`; holds rc and cmd.N.
    new_session: start argv in a new session with $T1_TTY naming the pty; argv must open it
        (`exec 0<>"$T1_TTY"`) to make it the controlling tty (saves a `setsid -c` exec).
        Otherwise argv must do that itself (e.g. start with `setsid -c`).
    """

    def __init__(
        self,
        argv: list[str],
        ctl_dir: Path,
        ctl_inside: str,
        nonce: str,
        cap: int = 64 * 1024,
        env: dict[str, str] | None = None,
        new_session: bool = False,
    ) -> None:
        self.argv, self.ctl_dir, self.ctl_inside = argv, Path(ctl_dir), ctl_inside
        self.nonce, self.cap, self.env = nonce, cap, env
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.master = -1
        self.shell_pgid = -1
        self.seq = 0
        self._nonce_b = nonce.encode()
        self._pending = bytearray()

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_hex(12)

    # -- lifecycle ---------------------------------------------------------------------------

    def write_rc(self) -> None:
        (self.ctl_dir / "rc").write_text(rc_text(self.nonce, self.ctl_inside))

    def start(self, timeout: float = 20.0) -> None:
        self.write_rc()
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # no echo even before the rc runs
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        env = self.env
        if self.new_session:  # argv must reopen $T1_TTY to make it its controlling tty
            env = {**(env if env is not None else os.environ), "T1_TTY": os.ttyname(slave)}
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env,
                close_fds=True,
                start_new_session=self.new_session,
                preexec_fn=terminal_signals_reset(),  # t1.store.lock
            )
        finally:
            os.close(slave)
        self.master = master
        os.set_blocking(master, False)
        out = CappedOutput(self.cap)
        hit = self._read_until(out, time.monotonic() + timeout, kinds="RX")
        if hit is None or hit.kind != "R":
            self.close()
            raise SandboxError(
                f"sandbox shell did not start within {timeout:.0f} s: {out.text()[-2000:]!r}"
            )
        self._after_ready()

    def _after_ready(self) -> None:
        try:
            self.shell_pgid = os.tcgetpgrp(self.master)
        except OSError:
            self.shell_pgid = -1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.master >= 0

    def close(self) -> None:
        if self.master >= 0:
            try:
                os.close(self.master)
            except OSError:
                pass
            self.master = -1

    # -- commands ----------------------------------------------------------------------------

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        if not self.alive():
            raise SandboxError("sandbox shell is not running (stopped, or its sandbox died)")
        t0 = time.monotonic()
        self.seq += 1
        n = self.seq
        path = self.ctl_dir / f"cmd.{n}"
        path.write_text(cmd if cmd.endswith("\n") else cmd + "\n")
        out = CappedOutput(self.cap)
        self._pending.clear()
        self._quiet_tty()
        self._write(f"__t1_run {n}\n".encode())
        deadline = None if timeout is None else t0 + timeout
        hit = self._read_until(out, deadline, kinds="CX", seq=str(n))
        timed_out = hit is None
        note = ""
        if timed_out:
            code, note = 124, self._recover(out)
        elif hit.kind == "X":
            code, note = hit.code, RESTART_NOTE
            self._wait_ready(out)
        else:
            code = hit.code
        try:
            path.unlink()
        except OSError:
            pass
        text = out.text() + note
        if timed_out:
            text += f"\n[t1: command timed out after {timeout:g} s and was interrupted]\n"
        return ExecResult(
            exit_code=code,
            output=text,
            timed_out=timed_out,
            truncated=out.cut > 0,
            seconds=time.monotonic() - t0,
        )

    def _recover(self, out: CappedOutput) -> str:
        """After a timeout: ^C, then kill the foreground group, then restart bash.

        Each step first waits for the shell to hold the terminal again: a sync line written
        while the interrupted job still reads the tty (a `grep` with no file, a program that
        asks "quit?" on ^C) is read and lost by that job, and whether that happened depended on
        scheduling; the same command gave "interrupted" in one run and a restarted shell in
        another (two fresh campaigns, step 9). A lost line is followed by another.
        """
        self._write(b"\x03")
        if self._await_shell(out, INTERRUPT_GRACE_S) == "X":
            return self._restarted(out)
        if synced := self._sync_tries(out):
            return RESTART_NOTE if synced == "X" else ""
        fg = self._fg_pgid()
        if fg > 0 and fg != self.shell_pgid:
            _killpg(fg)
            if self._await_shell(out, INTERRUPT_GRACE_S) == "X":
                return self._restarted(out)
            if synced := self._sync_tries(out):
                return RESTART_NOTE if synced == "X" else ""
        if self.shell_pgid > 0:
            _killpg(self.shell_pgid)
        return self._restarted(out)

    def _restarted(self, out: CappedOutput) -> str:
        """The note of a restarted shell, once the loop's new bash is ready."""
        if self._wait_ready(out):
            return RESTART_NOTE
        raise SandboxError("sandbox shell hung and could not be restarted")

    def _await_shell(self, out: CappedOutput, wait_s: float) -> str:
        """Wait (reading output) until the shell's own group holds the terminal again.

        "fg": it does; "job": the deadline passed with another group in front; "X": the shell
        exited (its loop restarts it).
        """
        deadline = time.monotonic() + wait_s
        while True:
            if self._fg_pgid() == self.shell_pgid:
                return "fg"
            left = deadline - time.monotonic()
            if left <= 0:
                return "job"
            if self._read_until(out, time.monotonic() + min(left, 0.02), kinds="X"):
                return "X"

    def _sync_tries(self, out: CappedOutput) -> str:
        """Sync with the shell; a sync line a dying job swallowed is followed by another.

        "S": the shell answered; "X": it exited meanwhile and its loop's new bash is ready (the
        caller says the shell was restarted); "": neither."""
        for _ in range(SYNC_TRIES):
            if got := self._sync(out, INTERRUPT_GRACE_S):
                return got
            if self._fg_pgid() != self.shell_pgid:  # a job still holds the terminal
                return ""
        return ""

    def _sync(self, out: CappedOutput, wait_s: float) -> str:
        time.sleep(0.02)
        self.seq += 1
        self._write(f"__t1_mark S{self.seq} $?\n".encode())
        hit = self._read_until(out, time.monotonic() + wait_s, kinds="SX", seq=str(self.seq))
        if hit is not None and hit.kind == "X":
            return "X" if self._wait_ready(out) else ""
        return "S" if hit is not None else ""

    def _wait_ready(self, out: CappedOutput, wait_s: float = 10.0) -> bool:
        hit = self._read_until(out, time.monotonic() + wait_s, kinds="R")
        if hit is not None:
            self._after_ready()
        return hit is not None

    def _quiet_tty(self) -> None:
        """Echo and onlcr off again (an earlier command may have run `stty echo` or `reset`)."""
        try:
            attrs = termios.tcgetattr(self.master)
            if attrs[3] & termios.ECHO or attrs[1] & termios.ONLCR:
                attrs[3] &= ~termios.ECHO
                attrs[1] &= ~termios.ONLCR
                termios.tcsetattr(self.master, termios.TCSANOW, attrs)
        except termios.error:
            pass

    def _fg_pgid(self) -> int:
        try:
            return os.tcgetpgrp(self.master)
        except OSError:
            return -1

    def _write(self, data: bytes) -> None:
        while data:
            try:
                n = os.write(self.master, data)
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)
                continue
            except OSError as e:
                raise SandboxError(f"sandbox shell is gone: {e}") from None
            data = data[n:]

    def _read_until(
        self, out: CappedOutput, deadline: float | None, kinds: str, seq: str | None = None
    ) -> _Hit | None:
        """Read into `out` until a sentinel of one of `kinds` (and `seq`, for C/S) arrives."""
        buf = self._pending
        while True:
            m, _ = find_sentinel(buf, self._nonce_b)
            while m is not None:
                kind, mseq, code = m.group(2).decode(), m.group(3).decode(), int(m.group(4))
                out.add(buf[: m.start()])
                del buf[: m.end()]
                if kind in kinds and (kind not in "CS" or mseq == seq):
                    return _Hit(kind, mseq, code)
                m, _ = find_sentinel(buf, self._nonce_b)  # stale (an earlier sync): go on
            if len(buf) > SENTINEL_MAX:
                out.add(buf[:-SENTINEL_MAX])
                del buf[:-SENTINEL_MAX]
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return None
            ready, _, _ = select.select([self.master], [], [], wait)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:  # EIO: every process holding the pty is gone
                chunk = b""
            if not chunk:
                out.add(buf)
                buf.clear()
                raise SandboxError(f"sandbox died; last output: {out.text()[-2000:]!r}")
            buf += chunk


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
