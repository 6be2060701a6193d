"""Terminal writes in start order (t1.sandbox.tty_order): the same command prints the same bytes.

.venv/bin/pytest tests/sandbox/test_tty_order.py -q
"""

from __future__ import annotations

import dataclasses
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from t1.sandbox.shell import PtyShell
from t1.sandbox.tty_order import (
    ARCHES,
    HOLD_MAX_S,
    Unsupported,
    filter_program,
    tty_order_prefix,
)
from tests.sandbox.test_shell import _kill_shell, _new_shell

# The two races that parted fresh campaigns (LOG.md): two processes of one pipeline print their
# errors at once, and the order on the terminal was the scheduler's.
RACES = "catach.txt | grep board to cedar.txt; th/scklac.log | ln -xr basilfo vapp"
IN_START_ORDER = (
    "bash: catach.txt: command not found\n"
    "grep: to: No such file or directory\n"
    "grep: cedar.txt: No such file or directory\n"
    "bash: th/scklac.log: No such file or directory\n"
    "ln: invalid option -- 'x'\n"
    "Try 'ln --help' for more information.\n"
)
# The older stage computes, then writes; the younger one writes at once. A terminal shows the
# younger first; in start order the younger waits while the older runs.
BUSY_THEN_WRITE = "(for ((i = 0; i < 20000; i++)); do :; done; echo older >&2) | echo younger"


def _shell(tmp_path, ordered: bool) -> PtyShell:
    sh = _new_shell(tmp_path, ordered)
    sh.start(timeout=20)
    return sh


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_the_filter_notifies_writes_to_fds_0_to_2_and_allows_the_rest(arch):
    code = filter_program(arch)
    ins = [struct.unpack_from("HBBI", code, i) for i in range(0, len(code), 8)]
    audit, _, writes = ARCHES[arch]
    assert ins[1][3] == audit and {ins[k][3] for k in (3, 4, 5)} == set(writes)
    assert ins[7] == (0x25, 1, 0, 2)  # fd > 2: allowed
    assert ins[8][3] == 0x7FC00000 and ins[9][3] == 0x7FFF0000  # USER_NOTIF, ALLOW
    # every jump lands inside the program
    for i, (op, jt, jf, _) in enumerate(ins):
        if op & 0x07 == 0x05:
            assert i + 1 + jt < len(ins) and i + 1 + jf < len(ins)


def test_an_unknown_architecture_is_refused_by_name():
    with pytest.raises(Unsupported, match="sparc64"):
        filter_program("sparc64")


def test_a_younger_process_waits_while_an_older_one_runs(tmp_path):
    """The negative control is the plain terminal: the same command, the other order."""
    for d in ("plain", "ordered"):
        (tmp_path / d).mkdir()
    plain, ordered = _shell(tmp_path / "plain", False), _shell(tmp_path / "ordered", True)
    try:
        assert plain.exec(BUSY_THEN_WRITE, timeout=30).output == "younger\nolder\n"
        assert ordered.exec(BUSY_THEN_WRITE, timeout=30).output == "older\nyounger\n"
    finally:
        _kill_shell(plain)
        _kill_shell(ordered)


def test_a_write_waits_at_most_hold_max_s_for_an_older_process_that_never_sleeps(tmp_path):
    """The guard: the older stage spins 4-5 s, so without it `younger` would come last."""
    assert HOLD_MAX_S < 4  # the spin outlasts the guard
    sh = _shell(tmp_path, True)
    try:
        # the stage itself spins (a child it forked would be younger than `echo younger`)
        spin = (
            "e=$((SECONDS + 5)); (while ((SECONDS < e)); do :; done; echo older >&2) | echo younger"
        )
        assert sh.exec(spin, timeout=30).output == "younger\nolder\n"
    finally:
        _kill_shell(sh)


def test_the_shell_protocol_holds_under_the_filter(tmp_path):
    """Timeouts, ^C, a restarted shell, capped output and background jobs, all through it."""
    sh = _shell(tmp_path, True)
    try:
        assert sh.exec("export KEEP=1; cd /tmp; echo $KEEP").output == "1\n"
        r = sh.exec("sleep 1000", timeout=0.5)
        assert r.timed_out and r.exit_code == 124
        assert sh.exec("echo $KEEP").output == "1\n"  # ^C was enough
        r = sh.exec("head -c 100000 /dev/zero | tr '\\0' a; echo; echo END")
        assert r.truncated and r.output.endswith("END\n")
        assert sh.exec("yes | head -c 3000000 | wc -c").output == "3000000\n"  # a pipe, not a tty
        assert sh.exec("sleep 0.2 & wait; echo done").output.endswith("done\n")
        r = sh.exec("exit 3")
        assert r.exit_code == 3 and "restarted" in r.output
        assert sh.exec("echo again").output == "again\n"
    finally:
        _kill_shell(sh)


def test_exit_status_and_a_missing_program_are_passed_on():
    run = tty_order_prefix()
    assert subprocess.run([*run, "false"]).returncode == 1
    r = subprocess.run([*run, "/no/such/program"], capture_output=True, text=True)
    assert r.returncode == 127 and "tty_order: /no/such/program" in r.stderr
    assert subprocess.run([*run, "bash", "-c", "kill -9 $$"]).returncode == 137


@pytest.mark.integration
def test_the_races_that_parted_two_campaigns_print_one_order_under_load():
    """Eight sandboxes at once on two cores: every run prints the pipelines in start order."""
    from t1.sandbox import SandboxSpec, open_sandbox

    def once(_):
        with open_sandbox(SandboxSpec(workdir="/app", tty_order=True)) as sb:
            return sb.exec(RACES, timeout=30).output

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(once, range(24)))
    assert outs == [IN_START_ORDER] * 24
    for ordered, expected in ((False, "younger\nolder\n"), (True, "older\nyounger\n")):
        with open_sandbox(SandboxSpec(workdir="/app", tty_order=ordered)) as sb:  # the wiring
            assert sb.exec(BUSY_THEN_WRITE, timeout=30).output == expected


def test_run_deterministic_orders_the_terminal_of_every_trajectory(monkeypatch, tmp_path):
    """`run.deterministic` reaches the sandbox spec of each trajectory (and off leaves it off)."""
    import t1.sandbox
    from t1.config import Config
    from t1.rollout.collect import run_one
    from t1.verify.reward import RewardSpec
    from tests.agent_helpers import example_tasks

    seen = []

    def fake_open(spec, backend="bwrap"):
        seen.append(spec)
        raise RuntimeError("stop here")

    monkeypatch.setattr(t1.sandbox, "open_sandbox", fake_open)
    task = example_tasks()[0]
    for det in (True, False):
        cfg = Config()
        cfg = dataclasses.replace(
            cfg,
            run=dataclasses.replace(cfg.run, deterministic=det),
            tasks=dataclasses.replace(cfg.tasks, env_cache=str(tmp_path / "env")),
        )
        traj = run_one(task, None, None, cfg, 0, None, reward=RewardSpec())
        assert "stop here" in traj.reason
    assert [s.tty_order for s in seen] == [True, False]
