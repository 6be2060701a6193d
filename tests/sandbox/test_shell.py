"""The persistent-shell protocol (t1.sandbox.shell), run on the host without a sandbox.

.venv/bin/pytest tests/sandbox/test_shell.py -q
"""

from __future__ import annotations

import re
import sys

import pytest

from t1.sandbox.base import SandboxError
from t1.sandbox.shell import CappedOutput, PtyShell, find_sentinel, outer_loop, rc_text
from t1.sandbox.tty_order import tty_order_prefix


def test_capped_output_under_cap_is_exact():
    c = CappedOutput(100)
    c.add(b"hello ")
    c.add(b"world")
    assert c.text() == "hello world" and c.cut == 0


def test_capped_output_keeps_head_and_tail_and_marks_cut():
    c = CappedOutput(20)
    data = bytes(range(65, 91)) * 4  # 104 bytes A..Z repeated
    for i in range(0, len(data), 7):
        c.add(data[i : i + 7])
    assert c.total == 104 and c.cut == 84
    text = c.text()
    assert text.startswith(data[:10].decode())
    assert text.endswith(data[-10:].decode())
    assert "[... 84 bytes cut ...]" in text


def test_capped_output_memory_stays_bounded():
    c = CappedOutput(1000)
    chunk = b"y\n" * 4096
    for _ in range(2000):  # 16 MB
        c.add(chunk)
    assert len(c.head) + len(c.tail) == 1000
    assert c.cut == 2000 * len(chunk) - 1000


def test_sentinel_parses_kinds_and_skips_other_nonces():
    m, end = find_sentinel(b"out\n\x1eT1-abc123-C7-42\x1e\n", b"abc123")
    assert m.group(2, 3, 4) == (b"C", b"7", b"42") and end == 3
    assert find_sentinel(b"\n\x1eT1-abc123-R-0\x1e\n", b"abc123")[0].group(2) == b"R"
    assert find_sentinel(b"\n\x1eT1-abc123-X--1\x1e\r\n", b"abc123")[0].group(4) == b"-1"
    forged = b"\n\x1eT1-dead-C7-0\x1e\n"
    assert find_sentinel(forged, b"abc123") == (None, len(forged))  # another nonce: output
    m, end = find_sentinel(forged + b"x\n\x1eT1-abc123-C7-3\x1e\n", b"abc123")
    assert m.group(4) == b"3" and end == len(forged) + 1


def test_rc_has_no_exec_and_the_loop_reports_exits():
    rc = rc_text("n0nce", "/run/t1")
    assert "stty" not in rc and "n0nce" in rc and "set +H" in rc
    loop = outer_loop("n0nce", "/run/t1")
    assert loop[0] == "/bin/bash" and "set -m" in loop[-1] and "X-%s" in loop[-1]


def _new_shell(tmp_path, tty_order: bool = False) -> PtyShell:
    nonce = PtyShell.new_nonce()
    prefix = tty_order_prefix() if tty_order else []  # run.deterministic's launch chain
    return PtyShell(
        ["setsid", "-c", *prefix, *outer_loop(nonce, str(tmp_path))],
        tmp_path,
        str(tmp_path),
        nonce,
        cap=4096,
    )


def _kill_shell(sh: PtyShell) -> None:
    if sh.proc is not None:
        import os
        import signal

        try:
            os.killpg(sh.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        sh.proc.wait()
    sh.close()


@pytest.fixture(params=[False, True], ids=["plain", "tty_order"])
def shell(tmp_path, request):
    sh = _new_shell(tmp_path, request.param)
    sh.start(timeout=20)
    yield sh
    _kill_shell(sh)


def test_state_persists_between_commands(shell, tmp_path):
    assert shell.exec(f"cd {tmp_path} && export FOO=bar && X=1").exit_code == 0
    r = shell.exec("echo $FOO $X; pwd")
    assert r.output == f"bar 1\n{tmp_path}\n"
    assert shell.exec("false").exit_code == 1
    assert shell.exec("(exit 42)").exit_code == 42


def test_multiline_heredoc_and_long_lines(shell):
    long = "x" * 20000
    r = shell.exec(f"cat <<'EOF'\nline1\n$HOME\nEOF\necho {long} | wc -c")
    assert r.output == "line1\n$HOME\n20001\n"


def test_forged_sentinel_in_output_is_just_output(shell):
    r = shell.exec(r"printf '\n\036T1-deadbeef-C1-0\036\n'; exit_code=5; (exit 5)")
    assert r.exit_code == 5
    assert "T1-deadbeef-C1-0" in r.output


def test_output_cap_on_large_output(shell):
    r = shell.exec("head -c 100000 /dev/zero | tr '\\0' 'a'; echo; echo END")
    assert r.truncated and r.exit_code == 0
    assert re.search(r"\[\.\.\. \d+ bytes cut \.\.\.\]", r.output)
    assert r.output.endswith("END\n") and len(r.output) < 4096 + 100


def test_timeout_interrupts_and_shell_survives(shell):
    shell.exec("export KEEP=1")
    r = shell.exec("sleep 1000", timeout=0.5)
    assert r.timed_out and r.exit_code == 124
    r = shell.exec("echo $KEEP")
    assert r.output == "1\n"  # ^C was enough: same shell, state kept


def test_a_job_that_reads_the_tty_after_ctrl_c_does_not_cost_the_shell(shell):
    # a program that reads one more line when interrupted (a "quit?" prompt; a `grep` with no
    # file that the scheduler has not yet let die) swallows the first sync line: recovery must
    # send another, not take the silence for a stuck shell and restart it (which reset cwd in
    # one of two otherwise identical campaigns)
    shell.exec("export KEEP=1")
    prog = (
        "import os, signal, sys; "
        "signal.signal(signal.SIGINT, lambda *a: (os.read(0, 4096), sys.exit(130))); "
        "print('waiting', flush=True); os.read(0, 4096)"
    )
    for _ in range(2):
        r = shell.exec(f'{sys.executable} -c "{prog}"', timeout=1.0)
        assert r.timed_out and r.exit_code == 124
        assert "restarted" not in r.output and "waiting" in r.output
    assert shell.exec("echo $KEEP").output == "1\n"  # the same shell throughout


def test_a_command_reading_the_terminal_times_out_the_same_way_each_time(shell):
    outs = {shell.exec("grep pattern-without-a-file", timeout=0.5).output for _ in range(3)}
    assert len(outs) == 1 and "restarted" not in outs.pop()


def test_stuck_shell_is_restarted_and_says_so(shell):
    # the trap first, on its own. A ^C makes the tty flush input bash has not read yet, so on a
    # loaded machine the timeout can fire before bash reads the loop's line and nothing is stuck
    # (0.5 s in two full-suite runs of 2026-12-03, 3 s in one of 2026-12-05): the loop says when
    # it runs, and a try whose line was never read is repeated with a longer timeout
    shell.exec("trap '' INT")
    for timeout in (3.0, 10.0, 30.0):
        r = shell.exec("echo looping; while :; do :; done", timeout=timeout)
        if "looping" in r.output:
            break
        assert r.timed_out and "interrupted" in r.output  # unread, flushed: the shell answers
    assert "looping" in r.output, "bash never read the loop's line"
    assert r.timed_out and "restarted" in r.output
    assert shell.exec("echo alive").output == "alive\n"


@pytest.mark.parametrize("body", ["while :; do :; done", "read x"])
def test_a_shell_that_exits_on_ctrl_c_says_it_was_restarted(shell, body):
    # bash runs the trap and exits while the host syncs after the ^C: the loop's new bash
    # answers, with cwd and variables reset, and the note must say so (it said "interrupted"
    # alone until 2026-12-05)
    shell.exec("cd /tmp; X=kept")
    r = shell.exec(f"trap 'exit 5' INT; {body}", timeout=1.0)
    assert r.timed_out and "restarted" in r.output, r.output
    assert shell.exec('echo "[$X]"').output == "[]\n"


def _assert_terminal_signals_at_default(sh) -> None:
    """The shell ignores neither SIGINT nor SIGQUIT; a command that traps ^C away still ends at
    its timeout (the shell restarts)."""
    import signal

    ignored = int(sh.exec("grep SigIgn /proc/self/status").output.split()[-1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1)), hex(ignored)
    sh.exec("trap '' INT")
    r = sh.exec("echo looping; while :; do :; done", timeout=1.0)
    assert "looping" in r.output and "restarted" in r.output, r.output


def test_a_campaign_started_in_the_background_gives_the_agent_the_same_terminal(tmp_path):
    """`cmd &` in a script starts cmd with SIGINT and SIGQUIT ignored, and everything below it
    inherited that: bash ignored `trap ... INT` and the agent's commands ignored a timeout's ^C.
    The shell gets their default actions back (the three tests above failed in full-suite
    runs started with `&`, 2026-12-05)."""
    import signal

    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    sh = _new_shell(tmp_path)
    try:
        sh.start(timeout=20)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    try:
        _assert_terminal_signals_at_default(sh)
    finally:
        _kill_shell(sh)


def test_a_campaign_in_the_foreground_starts_shells_without_a_fork_and_the_same_terminal(
    tmp_path, monkeypatch
):
    """Signals this process handles are reset by the exec: no preexec_fn, so subprocess starts
    the shell by vfork (a fork of the engine's process cost ~20 ms per sandbox); the shell's
    terminal is the one a background campaign's gets (the test above)."""
    import signal
    import subprocess

    from t1.store.lock import default_terminal_signals, terminal_signals_reset

    old = {s: signal.signal(s, signal.default_int_handler) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        assert terminal_signals_reset() is None
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        assert terminal_signals_reset() is default_terminal_signals
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        seen = []
        real = subprocess.Popen

        def popen(*a, **kw):
            seen.append(kw.get("preexec_fn"))
            return real(*a, **kw)

        monkeypatch.setattr(subprocess, "Popen", popen)
        sh = _new_shell(tmp_path)
        sh.start(timeout=20)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    try:
        assert seen == [None]
        _assert_terminal_signals_at_default(sh)
    finally:
        _kill_shell(sh)


def test_exit_restarts_the_shell(shell):
    r = shell.exec("exit 3")
    assert r.exit_code == 3 and "restarted" in r.output
    assert shell.exec("echo again").output == "again\n"


def test_dead_process_raises(shell):
    import os
    import signal

    os.killpg(shell.proc.pid, signal.SIGKILL)
    shell.proc.wait()
    with pytest.raises(SandboxError):
        shell.exec("echo x")


def test_stty_echo_by_a_command_does_not_leak_into_output(shell):
    shell.exec("stty echo onlcr")
    assert shell.exec("echo clean").output == "clean\n"
