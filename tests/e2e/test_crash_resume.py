"""Acceptance of issue 16: the tiny campaign survives SIGKILL of its whole process group.

    .venv/bin/pytest tests/e2e/test_crash_resume.py -s -m e2e     (-s prints the kill log)

A cut-down campaign (tests/e2e/crash.yaml: three tasks, one segment of two PPO steps) runs
once uninterrupted, and once - from SFT on, on a copy of the reference's finished earlier
stages - killed - SIGKILL to snakemake's whole process group - at three
points: while SFT trains, while the first PPO rollout runs, and while the second PPO step
writes its checkpoint; after the last kill the newest complete PPO checkpoint (the first
step's) is corrupted. After each kill: no process of the killed attempt may be alive 5 s
later (every process of an attempt carries T1_CRASH_ATTEMPT in its environment, so orphans
are found wherever they were reparented), then `snakemake --unlock` and the same command.
The resumed campaign must exit 0 with final weights bit-identical to the uninterrupted run,
each step once in metrics.jsonl (last attempt) and in the report, and the corruption and its
fallback listed in the report's incidents.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from e2e_helpers import BIN, ENV, REPO, snakemake, tail, workflow_copy
from safetensors.torch import load_file

from t1.store.ckpt import MARKER, list_step_dirs
from t1.store.metrics_log import last_attempt, read_events

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
]

CRASH = Path(__file__).resolve().parent / "crash.yaml"
TASKS = ("csv-summary", "word-frequency", "stats-debug")
RUN = "tiny"
CMD = ["--profile", "profiles/local", "campaign_dense", "--configfile", "crash.yaml"]


def _workflow(root: Path) -> Path:
    root.mkdir(parents=True)
    wf = workflow_copy(root)
    shutil.copy(CRASH, wf / "crash.yaml")
    for t in TASKS:
        shutil.copytree(REPO / "workflow/tasks" / t, wf / "crash_tasks" / t)
    return wf


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries T1_CRASH_ATTEMPT=marker."""
    needle = f"T1_CRASH_ATTEMPT={marker}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if needle not in Path(f"/proc/{d}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(int(d))
    return out


def _run_until(wf: Path, marker: str, when, what: str) -> str:
    """Start the campaign; SIGKILL its process group when `when(run_dir)` holds."""
    env = {**ENV, "T1_CRASH_ATTEMPT": marker}
    out = wf / f"{marker}.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [str(BIN / "snakemake"), *CMD], cwd=wf, env=env, start_new_session=True,
            stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    run_dir = wf / "results" / RUN
    t0 = time.monotonic()
    while proc.poll() is None:
        if when(run_dir):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            time.sleep(5)
            alive = _marked(marker)
            assert not alive, f"{what}: processes of the killed attempt still alive: {alive}"
            return f"{what} at {time.monotonic() - t0:.1f} s"
        time.sleep(0.005)
    raise AssertionError(
        f"the campaign ended (exit {proc.returncode}) before the kill: {what}\n"
        + out.read_text()[-6000:]
    )


def _in_sft(run: Path) -> bool:
    root = run / "sft/model/ckpt"
    return any((p / MARKER).exists() for _, p in list_step_dirs(root))


def _in_rollout(run: Path) -> bool:
    """`t1 rollout` took its output lock (at its start) and has not written rollout.json."""
    r = run / "ppo/steps/step_000000/rollout"
    return (r / ".t1-writer.lock").exists() and not (r / "rollout.json").exists()


def _writing_step1(run: Path) -> bool:
    """The second PPO step writes its checkpoint (a temp or unmarked step dir), or has logged
    its metrics and is about to (a write of a few ms can slip between two polls)."""
    train = run / "ppo/steps/step_000001/train"
    try:
        names = os.listdir(train / "ckpt")
    except FileNotFoundError:
        names = []
    writing = any(
        n.startswith(".tmp-step_")
        or (n.startswith("step_") and not (train / "ckpt" / n / MARKER).exists())
        for n in names
    )
    return writing or ((train / "metrics.jsonl").exists() and not (train / "DONE.json").exists())


def _corrupt_newest_ppo_checkpoint(run: Path) -> Path:
    best = None
    for train in sorted((run / "ppo/steps").glob("step_*/train")):
        for _, p in list_step_dirs(train / "ckpt"):
            if (p / MARKER).exists():
                best = p
    assert best is not None, "no complete PPO checkpoint to corrupt"
    part = best / "actor.safetensors"
    raw = bytearray(part.read_bytes())
    raw[-40] ^= 0xFF  # inside the tensor data: same size, wrong sha256
    part.write_bytes(bytes(raw))
    return best


def _final(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    last = run / "ppo/steps/step_000001/train"
    return {
        "actor": load_file(str(next((last / "actor").glob("*.safetensors")))),
        "critic": load_file(str(last / "critic/critic.safetensors")),
    }


def _from_reference(ref_wf: Path, root: Path) -> Path:
    """A copy of the finished reference workflow (results and .snakemake metadata) with
    everything from SFT on removed: the crashed run starts at SFT on the very same tasks,
    tokenizer, initial policy and expert trajectories (CI budget: those stages once, not
    twice), and snakemake reruns SFT -> PPO -> evaluation -> report."""
    shutil.copytree(ref_wf, root, symlinks=True)
    run = root / "results" / RUN
    for name in ("sft/model", "ppo", "eval", "logs", "manifest.json"):
        p = run / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    for p in run.glob("report*"):
        p.unlink()
    shutil.rmtree(root / ".snakemake/locks", ignore_errors=True)
    # the copy's --configfile has another absolute path: let run_config settle that first
    settle = ["--profile", "profiles/local", f"results/{RUN}/config.yaml"]
    r, _ = snakemake(root, *settle, "--configfile", "crash.yaml", timeout=300)
    assert r.returncode == 0, tail(r)
    return root


def test_campaign_killed_three_times_resumes_bit_identically(tmp_path):
    ref_wf = _workflow(tmp_path / "ref")
    r, ref_s = snakemake(ref_wf, *CMD, timeout=1500)
    assert r.returncode == 0, tail(r)
    wf = _from_reference(ref_wf, tmp_path / "crashed")
    log = [f"uninterrupted: {ref_s:.0f} s"]
    t0, corrupted = time.monotonic(), ""
    for i, (when, what) in enumerate(
        [(_in_sft, "SFT"), (_in_rollout, "PPO rollout"), (_writing_step1, "checkpoint write")]
    ):
        log.append(_run_until(wf, f"attempt-{i}-{os.getpid()}", when, what))
        if what == "checkpoint write":
            corrupted = str(_corrupt_newest_ppo_checkpoint(wf / "results" / RUN))
            log.append(f"corrupted {corrupted}")
        u, _ = snakemake(wf, "--unlock", *CMD, timeout=300)
        assert u.returncode == 0, tail(u)
    r, _ = snakemake(wf, *CMD, timeout=1500)
    log.append(f"crashed run in all: {time.monotonic() - t0:.0f} s")
    print("\n[crash-resume] " + "\n[crash-resume] ".join(log))
    assert r.returncode == 0, tail(r)
    run, ref = wf / "results" / RUN, ref_wf / "results" / RUN
    got, want = _final(run), _final(ref)
    for part in ("actor", "critic"):
        diff = [k for k in want[part] if not torch.equal(got[part][k], want[part][k])]
        assert not diff and got[part].keys() == want[part].keys(), f"{part} differs: {diff[:5]}"
    # each step once (the last attempt's record), in metrics.jsonl and in the report
    sft = last_attempt(read_events(run / "sft/model", "sft_step"))
    ref_sft = read_events(ref / "sft/model", "sft_step")
    assert [e["step"] for e in sft] == [e["step"] for e in ref_sft]
    for s in range(2):
        ev = last_attempt(read_events(run / f"ppo/steps/step_{s:06d}/train", "ppo_step"))
        assert [e["step"] for e in ev] == [s]
    report = (run / "report.md").read_text()
    table = report.split("## PPO steps")[1].split("\n\n")[1]
    steps = [ln.split(" | ")[0].lstrip("| ").split(" ")[0] for ln in table.splitlines()[2:]]
    assert steps == ["0", "1"], table
    assert f"| sft_step | {len(ref_sft)} |" in report, report
    incidents = report.split("## Incidents")[1]
    assert "checkpoint_corrupt" in incidents, incidents
    if "step_000000" in corrupted:  # the step before the one killed: it was redone
        assert "checkpoint_fallback" in incidents, incidents
    assert list((run / "logs/sft").glob("attempt-*.log")), "earlier attempts' logs kept"
    assert len(list((run / "logs/sft").glob("attempt-*.log"))) >= 2
