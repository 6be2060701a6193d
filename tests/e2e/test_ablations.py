"""Issue 14 item 4 on one machine: `snakemake --profile profiles/local campaign_ablations` with
the tiny config cut down (tests/e2e/ablations.yaml) finishes the three runs (dense, binary,
cold critic), measures the ablations and writes results/<run>/ablations.md: one table whose
every row is filled from the measured files. Whether the paper's shape holds is what the table
reports, not what this test asks.

    .venv/bin/pytest tests/e2e/test_ablations.py -s -m e2e

Runs the real workflow in a copy of the Snakefile, workflow/ and profiles/ under a temporary
directory (tests/e2e/e2e_helpers.py), so the developer's results/ is never touched.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from e2e_helpers import REPO, check_finished_campaign, snakemake, tail, workflow_copy

from t1.ablations import NOT_MEASURABLE, check_filled
from t1.campaign import derive_config, merge_files, runs
from t1.metrics_log import read_events
from t1.trajectory import Status, find_trajectories, load_trajectory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(5400), pytest.mark.slow]

OVERLAY = Path(__file__).resolve().parent / "ablations.yaml"


def _same(a, b) -> bool:
    """Equal, NaN/None meaning the same undefined figure."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == pytest.approx(b)


def test_campaign_ablations_fills_every_row_from_measured_files(tmp_path):
    wf = workflow_copy(tmp_path)
    shutil.copy(OVERLAY, wf / "ablations.yaml")
    cfg = derive_config(merge_files([REPO / "workflow/config/tiny.yaml", OVERLAY]), {})
    name = cfg["run"]["name"]
    arms = [name, f"{name}-binary", f"{name}-cold"]
    assert set(arms) <= set(runs(name)), "campaign.runs() lacks an ablation arm"
    args = ("--profile", "profiles/local", "campaign_ablations", "--configfile", "ablations.yaml")
    r, seconds = snakemake(wf, *args, timeout=5400)
    print(f"\n[e2e] campaign_ablations (ablations.yaml): {seconds:.0f} s, exit {r.returncode}")
    assert r.returncode == 0, tail(r)
    check_ablations(wf, cfg)
    rerun, _ = snakemake(wf, *args[:2], "-n", *args[2:], timeout=300)
    assert rerun.returncode == 0 and "Nothing to be done" in rerun.stdout, tail(rerun)


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
    for run in arms.values():
        for path in find_trajectories(results / run):
            rel = path.relative_to(results / run).parts
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
