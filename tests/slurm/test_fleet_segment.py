"""One PPO segment on the local Slurm with its rollout fleet split into job steps (issue 13).

    sudo bash .ci/slurm/up.sh && .venv/bin/pytest tests/slurm/test_fleet_segment.py -q -s

The tiny config with its fleet overlay (tests/slurm/fleet.yaml: one `t1 serve` replica,
colocated) runs `t1 segment` as one sbatch job; t1/run/segment_fleet.py starts the replica as a job
step, waits for its /health, runs the steps' rollouts against it (real sandboxes, real
verifiers) and each `t1 train --stage ppo` as a trainer job step, loads every step's weights
into the replica, and stops the replica step. `sacct` must show the server step and the trainer
steps in the one allocation, and the replica must report the segment's final weights.

Mid-segment (once step 0's rollout is written, while its trainer step runs) the test SIGSTOPs
the replica's `t1 serve` (alive, /health never answers): the driver must find it hung, kill it
(the stopped process dies while the segment runs; sacct: that step CANCELLED), start a new
replica0 step in the same allocation, load the newest export into it at the fleet's
weight_version (checked with /get_model_info), and step 1 must sample from it at step 0's
weights; fleet_steps.json records the restart (reason `hung`, old and new step).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_fixtures import slurm_problem

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
T1 = str(BIN / "t1")
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
TASKS = ["csv-summary", "word-frequency"]
STEPS = 2

_problem = slurm_problem()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(_problem is not None, reason=f"local Slurm not up: {_problem}"),
    pytest.mark.timeout(600),
]


def _t1(*args: str) -> None:
    r = subprocess.run([T1, *args], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sacct_steps(job: str) -> list[dict[str, str]]:
    """Every step of the job (batch, replica0, trainer, ...) with state and exit code."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"],
        capture_output=True,
        text=True,
    ).stdout
    rows = [
        dict(zip(("id", "name", "state", "exit"), line.split("|"), strict=False))
        for line in out.split("\n")
    ]
    return [r for r in rows if len(r) == 4]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _server_pid(port: int) -> int | None:
    """The `t1 serve` (not its watcher, not srun) listening on `port`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "serve" in args and "watch" not in args and args[:1] != ["srun"]:
            if "--port" in args and args[args.index("--port") + 1 :][:1] == [str(port)]:
                return int(proc.name)
    return None


def _hang_the_replica(done: Path, step0_rollout: Path, port: int, seg: subprocess.Popen) -> dict:
    """Once step 0's rollout is written: SIGSTOP the replica's server; then wait until it died
    (killed by the driver) while the segment still runs."""
    while not step0_rollout.exists():
        assert seg.poll() is None, "the segment ended before step 0's rollout"
        time.sleep(0.2)
    pid = _server_pid(port)
    assert pid is not None, f"no t1 serve on port {port}"
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    while _alive(pid) and seg.poll() is None and time.monotonic() - t0 < 240:
        time.sleep(0.2)
    return {"pid": pid, "died_mid_segment": not _alive(pid) and seg.poll() is None,
            "after_s": time.monotonic() - t0, "done_then": done.exists()}  # fmt: skip


def test_a_segment_splits_its_allocation_into_server_and_trainer_steps(tmp_path):
    port = _free_port()
    _t1("tokenizer", "train", "--vocab-size", "512", "--out", str(tmp_path / "tokenizer"))
    cfg = tmp_path / "config.yaml"
    _t1(
        "run-config", "--base", str(REPO / "workflow/config/tiny.yaml"),
        str(REPO / "tests/slurm/fleet.yaml"),
        "--set", "run.name=fleet", "--set", "run.threads=1", "--set", f"fleet.port={port}",
        "--set", "tokenizer.vocab_size=512", "--set", f"campaign.steps_per_segment={STEPS}",
        "--set", "rollout.launch=2", "--set", "rollout.admit=2", "--set", "rollout.workers=1",
        "--set", "agent.max_turns=1", "--set", "agent.context_tokens=1024",
        "--set", "engine.max_new_tokens=16", "--set", "ppo.minibatch=2",
        "--set", "reward.scale=10",  # the hand-made pool below records no assertion counts
        "--out", str(cfg),
    )  # fmt: skip
    _t1("init-policy", "--config", str(cfg), "--tokenizer", str(tmp_path / "tokenizer"),
        "--out", str(tmp_path / "sft" / "actor"))  # fmt: skip
    run = tmp_path / "run"
    (run / "pool/train").mkdir(parents=True)
    tasks = [{"path": str(REPO / "workflow/tasks" / t)} for t in TASKS]
    manifest = {"schema_version": 1, "status": "complete", "tasks": tasks}
    (run / "pool/train/manifest.json").write_text(json.dumps(manifest))
    done = run / "ppo/iter_00000/DONE"
    segment = [T1, "segment", "--config", str(cfg), "--iter", "0", "--run-dir", str(run),
               "--from", str(tmp_path / "sft"), "--tokenizer", str(tmp_path / "tokenizer"),
               "--out", str(done)]  # fmt: skip
    sbatch = ["sbatch", "--parsable", "--wait", "--account=t1", "--partition=debug", "--nodes=1"]
    sbatch += ["--ntasks=1", "--cpus-per-task=2", "--mem=3000M", "--time=10"]
    sbatch += [f"--chdir={REPO}", f"--output={tmp_path}/slurm-%j.out", "--job-name=t1-fleet-seg"]
    t0 = time.monotonic()
    seg = subprocess.Popen([*sbatch, "--wrap", " ".join(segment)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    try:
        rollout0 = run / "ppo/steps/step_000000/rollout/rollout.json"
        hang = _hang_the_replica(done, rollout0, port, seg)
        out, err = seg.communicate(timeout=540)
    finally:
        if seg.poll() is None:
            seg.kill()
    took = time.monotonic() - t0
    job = out.strip().split(";")[0]
    logs = "\n".join(p.read_text()[-6000:] for p in tmp_path.glob("slurm-*.out"))
    assert seg.returncode == 0, f"{out}{err}\n{logs}"
    print(f"sbatch job {job}: {took:.1f} s; hang {hang}\n{logs[-3000:]}")
    # the stopped server was killed by the driver, not by the job's end
    assert hang["died_mid_segment"] and not hang["done_then"], hang

    # one allocation, a server step beside the trainer steps (sacct may lag the job's end)
    for _ in range(30):
        steps = _sacct_steps(job)
        if sum(s["name"] == "trainer" for s in steps) == STEPS and all(
            s["state"] not in ("RUNNING", "PENDING") for s in steps if s["name"] == "replica0"
        ):
            break
        time.sleep(1)
    print("\n".join(f"{s['id']} {s['name']} {s['state']} {s['exit']}" for s in steps))
    assert {s["id"].split(".")[0] for s in steps} == {job}
    trainer = [s for s in steps if s["name"] == "trainer"]
    server = [s for s in steps if s["name"] == "replica0"]
    assert len(trainer) == STEPS and all(s["state"] == "COMPLETED" for s in trainer), steps
    # the hung step (cancelled by the driver) and its successor, both in this allocation
    assert len(server) == 2 and not {s["id"] for s in server} & {s["id"] for s in trainer}, steps
    old, new = sorted(server, key=lambda s: int(s["id"].split(".")[1]))
    assert old["state"].split()[0] in ("CANCELLED", "FAILED"), steps
    # stopped by the driver at the end: srun cancels its step on SIGTERM ("CANCELLED by 0")
    assert new["state"].split()[0] in ("COMPLETED", "CANCELLED"), steps
    assert any(s["name"] == "batch" and s["state"] == "COMPLETED" for s in steps), steps

    # every step sampled from the replica after loading its policy there
    for s in range(STEPS):
        sdir = run / f"ppo/steps/step_{s:06d}"
        prev = (tmp_path / "sft") if s == 0 else run / f"ppo/steps/step_{s - 1:06d}/train"
        fleet = json.loads((sdir / "rollout/fleet.json").read_text())
        assert fleet["weight_updates"] == 1 and fleet["failed_weight_updates"] == 0, fleet
        assert fleet["version"] == str((prev / "actor").resolve()), fleet
        assert fleet["requests"] > 0 and fleet["replicas"][0]["served"] > 0, fleet
        assert fleet["replicas"][0]["url"] == f"http://localhost:{port}", fleet
        assert (sdir / "train/DONE.json").exists()

    # the segment finished with its final weights on the replica, as the replica reports
    final = run / f"ppo/steps/step_{STEPS - 1:06d}/train/actor"
    rec = json.loads((run / "ppo/iter_00000/fleet_steps.json").read_text())
    assert rec["status"] == "complete" and rec["job_id"] == job, rec
    # the restart: found hung, the old step killed, a new one loaded at the current weights
    (restart,) = rec["replicas"][0]["restarts"]
    assert restart["reason"] == "hung" and "error" not in restart, restart
    assert (restart["old_step"], restart["new_step"]) == (old["id"], new["id"]), (restart, steps)
    assert rec["replicas"][0]["step"] == new["id"], rec["replicas"][0]
    current = {
        str(p.resolve())
        for p in (tmp_path / "sft/actor", run / "ppo/steps/step_000000/train/actor")
    }
    assert restart["weight_version"] in current, restart
    assert restart["weight_version"] == str(Path(restart["model_path"]).resolve()), restart
    assert any(ev["event"] == "hung" for ev in rec["events"]), rec["events"]
    (info,) = rec["replicas_after"]
    assert info["model_path"] == str(final) and info["weight_version"] == str(final.resolve())
    assert (
        rec["replicas"][0]["launch"][:1] == ["srun"] and "--overlap" in rec["replicas"][0]["launch"]
    )
    assert [t["line"][:1] for t in rec["trainer_steps"]] == [["srun"]] * STEPS
    assert json.loads(done.read_text())["status"] == "complete"
