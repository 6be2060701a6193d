"""Helpers of the end-to-end campaign tests: an isolated copy of the workflow, the real
snakemake run in it, and the checks of what a finished campaign leaves behind.

    .venv/bin/pytest tests/e2e -s -m e2e      # the tests that use it
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t1.agent.trajectory import Status, find_trajectories, load_trajectory
from t1.eval.ablations_rows import NOT_MEASURABLE, check_filled
from t1.store.metrics_log import read_events

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
    # summary.json (t1.eval.summary): every split x stage is a measured figure or null + a note
    summary = json.loads((run_dir / "summary.json").read_text())
    for split in ("heldout", "heldout_unseen", "train"):
        for stage in ("sft", "ppo"):
            fig = summary[split][stage]
            assert fig is None or {"resolved", "n", "ci95", "pass_at_k"} <= set(fig), (split, fig)
            assert fig is not None or any(
                n.startswith(f"{split}.{stage}") for n in summary["notes"]
            )


def check_synthesized_pool(wf: Path, run: str) -> dict:
    """The train pool holds tasks t1 synth validated and t1 audit accepted beside the seeds."""
    manifest = json.loads((wf / "results" / run / "pool/train/manifest.json").read_text())
    synth = wf / "results" / run / "tasks" / "audit"  # (tasks/families: t1 families, no audit)
    from_synth = [t for t in manifest["tasks"] if str(synth) in t["source"]]
    assert manifest["status"] == "complete" and from_synth, manifest["counts"]
    assert all(t["audited"] for t in from_synth), from_synth
    return manifest


# ---- campaign_ablations (issue 14 item 4): every row of the table filled from measured files


def _same(a, b) -> bool:
    """Equal, NaN/None meaning the same undefined figure."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == pytest.approx(b)


def check_ablations(wf: Path, cfg: dict) -> None:
    """Every row of results/<run>/ablations.md filled from the files it names (`cfg`: the
    campaign's config as a dict, every default spelled out)."""
    name = cfg["run"]["name"]
    arms = {"dense": name, "binary": f"{name}-binary", "cold": f"{name}-cold"}
    segments, per_segment = cfg["campaign"]["segments"], cfg["campaign"]["steps_per_segment"]
    steps = segments * per_segment
    results = wf / "results"
    recalibration = cfg["critic_warmup"]["recalibration_rollouts"]
    check_finished_campaign(wf, name, segments, per_segment, recalibration)
    for run in (arms["binary"], arms["cold"]):  # arms may share the dense run's SFT evaluation
        assert (results / run / "report.md").is_file() and (
            results / run / "eval/ppo/eval.json"
        ).is_file()
        for s in range(steps):
            metrics = results / run / "ppo/steps" / f"step_{s:06d}" / "train"
            assert read_events(metrics, "ppo_step"), f"{metrics}: no ppo_step event"

    md = results / name / "ablations.md"
    doc = json.loads((results / name / "ablations.json").read_text())
    print(md.read_text())
    rows = {r["key"]: r for r in doc["rows"]}
    assert list(rows) == ["gap", "drift", "critic", "reward", "heldout"]
    check_filled(doc["rows"])  # every cell holds text, every verdict is yes / no / not measurable
    for png in doc["plots"]:
        assert (wf / png).stat().st_size > 1000, png
    abl = results / name / "ablations"

    # (a) the figures are gap.json's
    gap = json.loads((abl / "gap.json").read_text())
    data = rows["gap"]["data"]
    assert gap["trajectories"] > 0 and data["trajectories"] == gap["trajectories"]
    assert _same(data["text"], gap["a_text_retokenized"]["gap"])
    assert _same(data["tito_r3"], gap["c_tito_r3"]["gap"])

    # (b) every trajectory the engine sampled in the three runs, none missed, none invented
    drift = json.loads((abl / "drift.json").read_text())
    data = rows["drift"]["data"]
    assert 0 < data["trajectories"] <= drift["engine_checked"]["trajectories"]
    sampled = 0  # policy-sampled, trained-on trajectories whose every turn has the engine's ids
    roots = [results / run for run in arms.values()] + [abl / "drift_rollout"]
    for root in roots:
        for path in find_trajectories(root):
            rel = path.relative_to(root).parts
            if "ablations" in rel or rel[:2] == ("sft", "expert"):
                continue
            t = load_trajectory(path)
            sampled += (
                t.status in (Status.COMPLETED, Status.TRUNCATED)
                and bool(t.turns)
                and all(turn.engine_ids is not None for turn in t.turns)
            )
    assert data["trajectories"] + data["errors"] == sampled, (data, sampled)
    assert data["by_kind"]["PPO rollouts"] > 0 and data["by_kind"]["evaluations"] > 0
    assert data["by_kind"]["drift rollout"] > 0  # ablations.drift_trajectories of the SFT policy

    # (c) three seeds on the same batches: one EV per PPO step of the dense run, both arms
    data = rows["critic"]["data"]
    assert len(data["seeds"]) == 3 and data["steps"] == steps
    for seed in data["seeds"]:
        saved = json.loads((wf / seed["path"]).read_text())
        for arm in ("warm", "cold"):
            assert len(seed[arm]["explained_variance"]) == steps
            assert seed[arm]["summary"] == saved["arms"][arm]["summary"]
    assert len(data["campaign"]["cold"]["explained_variance"]) == steps  # the cold run's own

    # (d) a resolved rate per PPO step of both runs, and their final evaluations
    data = rows["reward"]["data"]
    for arm in ("dense", "binary"):
        assert [p["step"] for p in data["curves"][arm]] == list(range(steps))
        ev = json.loads((results / arms[arm] / "eval/ppo/eval.json").read_text())
        o = ev["summary"]["overall"]
        assert (data["final"][arm]["resolved"], data["final"][arm]["trajectories"]) == (
            o["resolved"], o["trajectories"],
        )  # fmt: skip
        assert data["final"][arm]["ci95"] == o["ci95"]

    # (e) summary.json's held-out figures, or the reason there are none
    summary = json.loads((results / name / "summary.json").read_text())
    data = rows["heldout"]["data"]
    assert data["sft"] == summary["heldout"]["sft"] and data["ppo"] == summary["heldout"]["ppo"]
    if rows["heldout"]["holds"] == NOT_MEASURABLE:  # no held-out split, or one that is not
        assert data.get("pools") or any(n.startswith("heldout.") for n in data["notes"]), data
    else:
        assert data["test"]["p"] is None or 0 <= data["test"]["p"] <= 1
