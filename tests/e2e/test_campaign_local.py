"""The main DAG on one machine (issues 5 and 14): `snakemake --profile profiles/local
campaign_ablations` on the tiny config cut down (tests/e2e/ablations.yaml) runs the dense
campaign (`campaign_dense`: tasks, synthesis, families, pre-training, SFT, critic warm-up, PPO
segments, evaluation, report) and its binary-reward and cold-critic arms, then measures the
ablations and writes results/<run>/ablations.md: one table whose every row is filled from the
measured files. Whether the paper's shape holds is what the table reports, not what this test
asks. The full tiny campaign's figures are benchmarks (LOG.md), not assertions.

    .venv/bin/pytest tests/e2e/test_campaign_local.py -s -m e2e

Runs the real workflow in a copy of the repository's Snakefile, workflow/ (seed tasks
included) and profiles/ under a temporary directory, so the developer's results/ is never
touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import (
    REPO,
    check_ablations,
    check_synthesized_pool,
    snakemake,
    tail,
    workflow_copy,
)

from t1.run.campaign import derive_config, merge_files, runs

pytestmark = [
    pytest.mark.e2e,
    # the whole campaign and its arms; pyproject's default (900 s) is for single tests
    pytest.mark.timeout(5400),
    pytest.mark.slow,
]

OVERLAY = Path(__file__).resolve().parent / "ablations.yaml"


def test_local_campaign_and_its_ablations_finish_with_reports_and_one_filled_table(tmp_path):
    wf = workflow_copy(tmp_path)
    shutil.copy(OVERLAY, wf / "ablations.yaml")
    cfg = derive_config(merge_files([REPO / "workflow/config/tiny.yaml", OVERLAY]), {})
    name = cfg["run"]["name"]
    assert {name, f"{name}-binary", f"{name}-cold"} <= set(runs(name))
    args = ("--profile", "profiles/local", "campaign_ablations", "--configfile", "ablations.yaml")
    r, seconds = snakemake(wf, *args, timeout=5400)
    print(
        f"\n[e2e] local campaign_ablations (ablations.yaml): {seconds:.0f} s, exit {r.returncode}"
    )
    assert r.returncode == 0, tail(r)
    check_ablations(wf, cfg)  # the dense run finished (report, metrics), then the table
    if cfg["campaign"]["synthesize"]:
        counts = check_synthesized_pool(wf, name)["counts"]
        print(f"[e2e] train pool: {counts}")
    summary = (wf / "results" / name / "summary.json").read_text()
    assert '"heldout"' in summary
    rerun, _ = snakemake(wf, *args[:2], "-n", *args[2:], timeout=300)
    assert rerun.returncode == 0 and "Nothing to be done" in rerun.stdout, tail(rerun)
    # a PPO step with its commands forked from a warm driver computes what fresh ones do
    bench = subprocess.run(
        [sys.executable, "-m", "t1.cli", "bench", "segment", "--run-dir", f"results/{name}",
         "--steps", "1", "--dir", str(tmp_path)],  # fmt: skip
        cwd=wf, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    got = json.loads(bench.stdout)
    print(f"[e2e] bench segment: {got['seconds_per_step']} s per step")
    assert got["actors_identical"] and len(got["actor_sha256"]) == 1
