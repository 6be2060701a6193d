"""Helpers of the end-to-end campaign tests: an isolated copy of the workflow, the real
snakemake run in it, and the checks of what a finished campaign leaves behind.

    .venv/bin/pytest tests/e2e -s -m e2e      # the tests that use it
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
FEWER_STEPS = Path(__file__).resolve().parent / "fewer_steps.yaml"


def workflow_copy(root: Path) -> Path:
    """Snakefile, workflow/ (seed tasks included) and profiles/ copied to root; results go to
    root/results."""
    shutil.copy(REPO / "Snakefile", root)
    for d in ("workflow", "profiles"):
        shutil.copytree(REPO / d, root / d)
    return root


def snakemake(wf: Path, *args: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run the real snakemake in wf; returns the process and its duration in seconds."""
    t0 = time.monotonic()
    r = subprocess.run(
        [str(BIN / "snakemake"), *args],
        cwd=wf,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r, time.monotonic() - t0


def tail(r: subprocess.CompletedProcess, n: int = 8000) -> str:
    return (r.stdout + r.stderr)[-n:]


def planned_jobs(dry_run_out: str) -> dict[str, int]:
    """rule -> jobs of the DAG, from `snakemake -n` output (a dry run prints local rules as
    `rule X:` too)."""
    jobs: dict[str, int] = {}
    for rule in re.findall(r"^(?:local)?rule (\w+):$", dry_run_out, re.M):
        jobs[rule] = jobs.get(rule, 0) + 1
    return jobs


def ran_locally(run_out: str) -> set[str]:
    """Rules a real (not dry) run printed as `localrule X:` (run by snakemake itself)."""
    return set(re.findall(r"^localrule (\w+):$", run_out, re.M))


def declared_local_rules(wf: Path) -> set[str]:
    """Rules with `localrule: True` in the Snakefile and workflow/rules/*.smk."""
    out = set()
    for f in [wf / "Snakefile", *sorted((wf / "workflow/rules").glob("*.smk"))]:
        for block in re.split(r"(?m)^(?=rule )", f.read_text())[1:]:
            if re.search(r"^    localrule: True$", block.split("\n\n\n")[0], re.M):
                out.add(block.split(":")[0].split()[1])
    return out


def events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def check_finished_campaign(
    wf: Path, run: str, segments: int, steps_per_segment: int, recalibration: int
) -> None:
    """report.md mentions the PPO steps; every step has a metrics.jsonl with its ppo_step
    event; every segment has its DONE marker; past the critic-only recalibration steps
    (critic_warmup.recalibration_rollouts) the actor was updated."""
    run_dir = wf / "results" / run
    assert (run_dir / "config.yaml").is_file(), "the run's pinned config is missing"
    report = run_dir / "report.md"
    assert report.is_file(), f"{report} missing"
    text = report.read_text()
    assert "## PPO steps" in text, f"{report} has no PPO steps table:\n{text[:2000]}"
    for i in range(segments):
        done = run_dir / "ppo" / f"iter_{i:05d}" / "DONE"
        assert done.is_file(), f"{done} missing"
    ppo_steps = []
    for s in range(segments * steps_per_segment):
        metrics = run_dir / "ppo" / "steps" / f"step_{s:06d}" / "train" / "metrics.jsonl"
        assert metrics.is_file(), f"{metrics} missing"
        ppo = [e for e in events(metrics) if e.get("event") == "ppo_step"]
        assert ppo, f"{metrics} holds no ppo_step event"
        ppo_steps += ppo
    assert len(ppo_steps) >= segments * steps_per_segment
    if segments * steps_per_segment > recalibration:
        assert any(e.get("actor_updated") for e in ppo_steps), "no PPO step updated the actor"
    for stage in ("sft", "ppo"):
        assert (run_dir / "eval" / stage / "eval.json").is_file(), f"eval of {stage} missing"
    # summary.json (t1.eval_summary): every split x stage is a measured figure or null + a note
    summary = json.loads((run_dir / "summary.json").read_text())
    for split in ("heldout", "train"):
        for stage in ("sft", "ppo"):
            fig = summary[split][stage]
            assert fig is None or {"resolved", "n", "ci95", "pass_at_k"} <= set(fig), (split, fig)
            assert fig is not None or any(n.startswith(f"{split}.{stage}") for n in summary["notes"])


def check_synthesized_pool(wf: Path, run: str) -> dict:
    """The train pool holds tasks t1 synth validated and t1 audit accepted beside the seeds."""
    manifest = json.loads((wf / "results" / run / "pool/train/manifest.json").read_text())
    synth = wf / "results" / run / "tasks"
    from_synth = [t for t in manifest["tasks"] if str(synth) in t["source"]]
    assert manifest["status"] == "complete" and from_synth, manifest["counts"]
    assert all(t["audited"] for t in from_synth), from_synth
    return manifest
