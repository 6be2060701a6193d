"""Segment supervisor (t1/supervise/supervisor.py) with real processes: hangs, deaths, signals, resume.

.venv/bin/pytest tests/test_supervise.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from t1.store.ckpt import latest_complete
from t1.store.incidents import read_incidents
from t1.supervise.child import EXIT_DONE, EXIT_FAILED, EXIT_REQUEUE, EXIT_USAGE

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
FAST = ["--backoff-s", "0.05", "--backoff-max-s", "1", "--kill-grace-s", "1", "--deadline", "none"]

# A tiny "trainer": N steps of a deterministic random walk whose state (value, RNG, history)
# is checkpointed every step with t1.store.ckpt; resumes from the newest checkpoint; on SIGUSR2 /
# SIGTERM it finishes the step, checkpoints and exits 75. Optional faults by environment:
# HANG_AT=k (first start only): stop heartbeating at step k; DIE_AT=k: SIGKILL itself at step k
# on starts listed in DIE_ON (e.g. "0,1").
TRAINER = textwrap.dedent(
    """
    import os, random, sys, time
    from t1.store.ckpt_retention import CheckpointManager
    from t1.supervise.child import StopRequest, heartbeat, EXIT_REQUEUE
    root, total = sys.argv[1], int(sys.argv[2])
    stop = StopRequest()
    mgr = CheckpointManager(root, keep=2)
    ck = mgr.latest()
    if ck:
        state = ck.load("state"); history = ck.load("metrics")
        v, internal, gauss = ck.load("rng"); random.setstate((v, tuple(internal), gauss))
    else:
        random.seed(7); state = {"step": 0, "x": 0.0}; history = []
    restart = int(os.environ.get("T1_RESTART", "0"))
    hang_at = int(os.environ.get("HANG_AT", "-1")) if restart == 0 else -1
    die_at = int(os.environ.get("DIE_AT", "-1"))
    die_on = os.environ.get("DIE_ON", "").split(",")
    print("resume at", state["step"], flush=True)
    while state["step"] < total:
        heartbeat()
        if state["step"] == hang_at:
            time.sleep(3600)
        if state["step"] == die_at and str(restart) in die_on:
            os.kill(os.getpid(), 9)
        time.sleep(float(os.environ.get("STEP_S", "0.02")))
        state["x"] += random.gauss(0, 1)
        state["step"] += 1
        history.append([state["step"], state["x"]])
        mgr.save(state["step"], {"state": state, "metrics": history, "rng": random.getstate()},
                 formats={"rng": "json"},
                 meta={"stopped_by": stop.signal})
        open(os.path.join(root, "progress"), "w").write(str(state["step"]))
        if stop.requested:
            print("checkpointed at", state["step"], "after", stop.signal, flush=True)
            mgr.close()
            sys.exit(EXIT_REQUEUE)
    mgr.close()
    heartbeat()
    print("done", flush=True)
    """
)


@pytest.fixture
def trainer(tmp_path):
    path = tmp_path / "trainer.py"
    path.write_text(TRAINER)
    return [sys.executable, str(path)]


def supervise(*args, env=None, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "t1.cli", "supervise", *args]
    return subprocess.Popen(
        cmd,
        env={**ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def run_supervise(*args, env=None, timeout=60) -> tuple[int, str]:
    p = supervise(*args, env=env)
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def kinds(workdir: Path) -> list[str]:
    return [r["kind"] for r in read_incidents(workdir / "incidents.jsonl")]


def wait_for_progress(root: Path, at_least: int, timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            if int((root / "progress").read_text() or 0) >= at_least:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no progress to {at_least} under {root}")


def reference_history(tmp_path, trainer, steps: int) -> list:
    root = tmp_path / "reference"
    subprocess.run([*trainer, str(root), str(steps)], env=ENV, check=True, capture_output=True)
    return latest_complete(root).load("metrics")


def test_hung_child_is_killed_and_restarted(tmp_path, trainer):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    rc, out = run_supervise(
        "--workdir",
        str(wd),
        "--heartbeat-timeout-s",
        "2",
        *FAST,
        "--",
        *trainer,
        str(root),
        "6",
        env={"HANG_AT": "3"},
    )
    assert rc == EXIT_DONE, out
    assert kinds(wd) == ["child_hung", "child_restarted", "supervisor_exit"], out
    hung = read_incidents(wd / "incidents.jsonl")[0]
    assert hung["child"] == "main" and hung["silent_s"] >= 2 and hung["schema_version"] == 1
    assert latest_complete(root).load("metrics") == reference_history(tmp_path, trainer, 6)


def test_dying_child_is_restarted_until_the_budget_is_spent(tmp_path):
    wd = tmp_path / "wd"
    rc, out = run_supervise(
        "--workdir",
        str(wd),
        "--max-restarts",
        "2",
        *FAST,
        "--",
        sys.executable,
        "-c",
        "import sys; sys.exit(3)",
    )
    assert rc == EXIT_FAILED, out
    records = read_incidents(wd / "incidents.jsonl")
    assert [r["kind"] for r in records] == [
        "child_died",
        "child_restarted",
        "child_died",
        "child_restarted",
        "restart_budget_exhausted",
        "supervisor_exit",
    ]
    assert [r["action"] for r in records if r["kind"] == "child_died"] == [
        "restart 1 in 0.05 s",
        "restart 2 in 0.1 s",  # exponential backoff
    ]
    assert records[-1]["status"] == "failed" and records[-1]["exit"] == EXIT_FAILED
    assert (wd / "logs" / "main.log").read_text().count("--- start") == 3


def test_child_killed_mid_run_is_restarted_and_resumes(tmp_path, trainer):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    rc, out = run_supervise(
        "--workdir",
        str(wd),
        *FAST,
        "--",
        *trainer,
        str(root),
        "8",
        env={"DIE_AT": "4", "DIE_ON": "0"},
    )
    assert rc == EXIT_DONE, out
    died = read_incidents(wd / "incidents.jsonl")[0]
    assert died["kind"] == "child_died" and died["how"] == "signal SIGKILL"
    assert "resume at 4" in out
    assert latest_complete(root).load("metrics") == reference_history(tmp_path, trainer, 8)


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGTERM])
def test_stop_signal_checkpoints_and_exits_75_then_resume_finishes(tmp_path, trainer, sig):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    p = supervise(
        "--workdir", str(wd), *FAST, "--", *trainer, str(root), "400", env={"STEP_S": "0.05"}
    )
    wait_for_progress(root, 2)
    p.send_signal(sig)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == EXIT_REQUEUE, out
    ck = latest_complete(root)
    # the supervisor forwards its stop signal (SIGUSR2) whatever signal it got itself
    assert ck.step < 400 and f"checkpointed at {ck.step} after SIGUSR2" in out
    records = read_incidents(wd / "incidents.jsonl")
    assert records[0]["kind"] == "stop_requested" and records[0]["reason"] == sig.name
    assert records[-1]["status"] == "requeue" and records[-1]["exit"] == EXIT_REQUEUE
    rc, out = run_supervise(
        "--workdir", str(wd), *FAST, "--", *trainer, str(root), str(ck.step + 3)
    )
    assert rc == EXIT_DONE and f"resume at {ck.step}" in out, out


def test_resume_is_idempotent_however_often_it_happens(tmp_path, trainer):
    """Stops by signal, kills by the supervisor's restarts and plain reruns, many times: the
    result equals the uninterrupted run's, each step exactly once. The last stop comes at step
    26 or later: 60 steps leave its SIGUSR2 a second to land (at 30, a loaded machine's signal
    arrived after the 4 steps left had finished: exit 0, not 75)."""
    wd, root, total = tmp_path / "wd", tmp_path / "ckpt", 60
    for i in range(4):
        p = supervise(
            "--workdir",
            str(wd),
            *FAST,
            "--",
            *trainer,
            str(root),
            str(total),
            env={"STEP_S": "0.03", "DIE_AT": str(3 + 7 * i), "DIE_ON": "0"},
        )
        wait_for_progress(root, 5 + 7 * i)
        p.send_signal(signal.SIGUSR2)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == EXIT_REQUEUE, out
    rc, out = run_supervise("--workdir", str(wd), *FAST, "--", *trainer, str(root), str(total))
    assert rc == EXIT_DONE, out
    rc, out = run_supervise("--workdir", str(wd), *FAST, "--", *trainer, str(root), str(total))
    assert rc == EXIT_DONE and f"resume at {total}" in out  # a finished run stays finished
    history = latest_complete(root).load("metrics")
    assert [s for s, _ in history] == list(range(1, total + 1))
    assert history == reference_history(tmp_path, trainer, total)


def test_deadline_stops_like_a_signal(tmp_path, trainer):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    args = ["--workdir", str(wd), "--backoff-s", "0.05", "--deadline", "2.0", "--"]
    rc, out = run_supervise(*args, *trainer, str(root), "1000", env={"STEP_S": "0.05"})
    assert rc == EXIT_REQUEUE, out
    assert read_incidents(wd / "incidents.jsonl")[0]["reason"] == "time limit ahead"
    assert f"checkpointed at {latest_complete(root).step} after SIGUSR2" in out


def test_services_restart_and_stop_with_the_main_child(tmp_path, trainer):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    spec = tmp_path / "children.yaml"
    flaky = "import time, os; print('engine up', os.environ['T1_RESTART'], flush=True); time.sleep(0.3 if os.environ['T1_RESTART'] == '0' else 3600)"
    spec.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "children": [
                    {
                        "name": "engine",
                        "role": "service",
                        "heartbeat": "output",
                        "heartbeat_timeout_s": 0,
                        "cmd": [sys.executable, "-c", flaky],
                    },
                    {
                        "name": "trainer",
                        "cmd": [*trainer, "{workdir}/../ckpt", "20"],
                        "env": {"STEP_S": "0.05"},
                    },
                ],
            }
        )
    )
    rc, out = run_supervise("--workdir", str(wd), "--spec", str(spec), *FAST)
    assert rc == EXIT_DONE, out
    assert "[engine] engine up 1" in out and "[trainer] done" in out
    records = read_incidents(wd / "incidents.jsonl")
    assert [r["kind"] for r in records] == ["child_died", "child_restarted", "supervisor_exit"]
    assert records[0]["child"] == "engine" and records[-1]["restarts"] == {
        "engine": 1,
        "trainer": 0,
    }
    assert latest_complete(root).step == 20


def test_exit_2_is_fatal_at_once(tmp_path):
    wd = tmp_path / "wd"
    rc, out = run_supervise(
        "--workdir", str(wd), *FAST, "--", sys.executable, "-c", "import sys; sys.exit(2)"
    )
    assert rc == EXIT_FAILED, out
    assert kinds(wd) == ["child_fatal", "supervisor_exit"]


def test_children_die_with_a_killed_supervisor(tmp_path):
    wd, pidfile = tmp_path / "wd", tmp_path / "child.pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(3600)"
    p = supervise("--workdir", str(wd), *FAST, "--", sys.executable, "-c", code)
    end = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < end
        time.sleep(0.05)
    child = int(pidfile.read_text())
    p.kill()
    p.wait()
    end = time.time() + 10
    while Path(f"/proc/{child}").exists() and "zombie" not in _proc_state(child):
        assert time.time() < end, "child outlived its SIGKILLed supervisor"
        time.sleep(0.05)


def test_a_new_supervisor_kills_what_a_killed_one_left(tmp_path):
    """The child dies with its SIGKILLed supervisor, but a grandchild in its process group (a
    trainer without a parent-death signal) lives on; the next supervisor on the workdir finds
    it through WORKDIR/children.json and kills it before it starts its own children."""
    wd, gc_file = tmp_path / "wd", tmp_path / "grandchild.pid"
    code = f"sleep 3600 & echo $! > {gc_file}; wait"
    p = supervise("--workdir", str(wd), *FAST, "--", "sh", "-c", code)
    end = time.time() + 30
    while not gc_file.exists() or not gc_file.read_text().strip():
        assert time.time() < end
        time.sleep(0.05)
    grandchild = int(gc_file.read_text())
    p.kill()
    p.wait()
    time.sleep(0.5)
    assert "zombie" not in _proc_state(grandchild), "nothing was left to reap: no test"
    rc, out = run_supervise("--workdir", str(wd), *FAST, "--", "true")
    assert rc == EXIT_DONE, out
    end = time.time() + 30  # ends as soon as it is killed; the margin is for a loaded machine
    while "zombie" not in _proc_state(grandchild):
        assert time.time() < end, "the orphan outlived the next supervisor's start"
        time.sleep(0.05)
    assert "orphan_killed" in kinds(wd)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (FileNotFoundError, IndexError):
        return "zombie"


@pytest.mark.parametrize(
    "spec, words",
    [
        (
            "schema_version: 1\nchildren:\n  - name: a\n    cmd: [true]\n    colour: red\n",
            "unknown key 'colour'",
        ),
        ("schema_version: 2\nchildren: []\n", "schema_version must be 1"),
        (
            "schema_version: 1\nchildren:\n  - name: a\n    role: service\n    cmd: [true]\n",
            "no main child",
        ),
    ],
)
def test_bad_spec_is_refused_with_its_file_named(tmp_path, spec, words):
    path = tmp_path / "children.yaml"
    path.write_text(spec)
    rc, out = run_supervise("--workdir", str(tmp_path / "wd"), "--spec", str(path))
    assert rc == EXIT_USAGE and words in out and str(path) in out


def test_second_supervisor_on_a_workdir_waits_for_the_first(tmp_path, trainer):
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    first = supervise(
        "--workdir", str(wd), *FAST, "--", *trainer, str(root), "15", env={"STEP_S": "0.1"}
    )
    wait_for_progress(root, 2)
    rc, out = run_supervise("--workdir", str(wd), *FAST, "--", *trainer, str(root), "15")
    first_out, _ = first.communicate(timeout=60)
    assert first.returncode == EXIT_DONE, first_out
    assert rc == EXIT_DONE and "resume at 15" in out, out  # ran only after the first finished
    wait = read_incidents(wd / "incidents.jsonl")[0]
    assert wait["kind"] == "lock_wait" and f'"pid": {first.pid}' in wait["holder"]


@pytest.mark.parametrize(
    "stop, requeued",
    [("SIGUSR2", True), ("deadline", True), ("SIGTERM", False), ("SIGINT", False)],
)
def test_requeue_only_after_a_stop_of_our_own(tmp_path, trainer, stop, requeued):
    """Inside Slurm with --requeue, the job requeues itself after its own deadline or SIGUSR2;
    after SIGTERM (`scontrol requeue`, preemption, scancel) it leaves that to Slurm or the
    user: a second requeue can land on the job's next run (t1/supervise/slurm_job.py)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    wd, root = tmp_path / "wd", tmp_path / "ckpt"
    env = {"STEP_S": "0.05", "SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    flags = ["--backoff-s", "0.05", "--kill-grace-s", "1", "--requeue"]
    flags += ["--deadline", "2.0" if stop == "deadline" else "none"]
    p = supervise("--workdir", str(wd), *flags, "--", *trainer, str(root), "1000", env=env)
    if stop != "deadline":
        wait_for_progress(root, 2)
        p.send_signal(getattr(signal, stop))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == EXIT_REQUEUE, out
    assert latest_complete(root).step < 1000
    if requeued:
        assert calls.read_text().split() == ["requeue", "4242"], out
        assert "requeued job 4242" in out
    else:
        assert not calls.exists(), calls.read_text()
        assert f"stopped by {stop}" in out
