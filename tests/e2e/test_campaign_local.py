"""Acceptance of issue 5, on one machine: `snakemake --profile profiles/local campaign_dense`
with the tiny config finishes and leaves results/<run>/report.md and per-step metrics.

    .venv/bin/pytest tests/e2e/test_campaign_local.py -s -m e2e     # ~20 min on 2 cores

Runs the real workflow in a copy of the repository's Snakefile, workflow/ (seed tasks
included) and profiles/ under a temporary directory, so the developer's results/ is never
touched.
"""

from __future__ import annotations

import pytest
from e2e_helpers import (
    REPO,
    check_finished_campaign,
    check_synthesized_pool,
    snakemake,
    tail,
    workflow_copy,
)

from t1.config import load_config

pytestmark = [
    pytest.mark.e2e,
    # the whole campaign; pyproject's default (900 s) is for single tests
    pytest.mark.timeout(3600),
    pytest.mark.slow,
]


def test_local_campaign_dense_finishes_with_report_and_metrics(tmp_path):
    wf = workflow_copy(tmp_path)
    tiny = load_config(REPO / "workflow/config/tiny.yaml")
    r, seconds = snakemake(wf, "--profile", "profiles/local", "campaign_dense", timeout=3600)
    print(f"\n[e2e] local campaign_dense (tiny config): {seconds:.0f} s, exit {r.returncode}")
    assert r.returncode == 0, tail(r)
    check_finished_campaign(
        wf,
        tiny.run.name,
        tiny.campaign.segments,
        tiny.campaign.steps_per_segment,
        tiny.critic_warmup.recalibration_rollouts,
    )
    if tiny.campaign.synthesize:
        counts = check_synthesized_pool(wf, tiny.run.name)["counts"]
        print(f"[e2e] train pool: {counts}")
    rerun, _ = snakemake(wf, "--profile", "profiles/local", "-n", "campaign_dense", timeout=300)
    assert rerun.returncode == 0 and "Nothing to be done" in rerun.stdout, tail(rerun)
