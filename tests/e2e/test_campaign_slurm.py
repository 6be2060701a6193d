"""Acceptance of issue 5, through the real local Slurm (.ci/slurm/up.sh): the tiny campaign
with fewer steps (tests/e2e/fewer_steps.yaml) finishes under the Snakemake Slurm executor
(profiles/slurm-ci) with every non-local rule of the DAG run as a Slurm job, COMPLETED in sacct.

    sudo bash .ci/slurm/up.sh && .venv/bin/pytest tests/e2e/test_campaign_slurm.py -s -m slurm

Runs in a temporary copy of the workflow (the developer's results/ is never touched). The
rules a job ran as are read from the executor's per-job logs
(.snakemake/slurm_logs/rule_<rule>/[<wildcards>/]<slurm job id>.log, kept by the profile's
slurm-keep-successful-logs), the jobs' states from `sacct` (jobs since the test started).
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from e2e_helpers import (
    FEWER_STEPS,
    check_finished_campaign,
    declared_local_rules,
    planned_jobs,
    ran_locally,
    snakemake,
    tail,
    workflow_copy,
)
from shared_fixtures import slurm_problem

_problem = slurm_problem()
pytestmark = [
    pytest.mark.e2e,
    # the whole campaign; pyproject's default (900 s) is for single tests
    pytest.mark.timeout(3600),
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(_problem is not None, reason=f"local Slurm not up: {_problem}"),
]


def sacct_since(start: str) -> dict[str, tuple[str, str]]:
    """Slurm job id -> (job name, state) of the jobs submitted since start (YYYY-MM-DDTHH:MM:SS)."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-S", start, "--format=JobID,JobName,State"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobs = {}
    for line in out.splitlines():
        job, name, state = line.split("|")[:3]
        jobs[job] = (name, state.split()[0])
    return jobs


def slurm_jobs_by_rule(wf: Path) -> dict[str, list[str]]:
    """rule -> Slurm job ids, from the executor's kept per-job logs."""
    out: dict[str, list[str]] = {}
    for log in (wf / ".snakemake/slurm_logs").rglob("*.log"):
        rule_dir = log.relative_to(wf / ".snakemake/slurm_logs").parts[0]
        out.setdefault(rule_dir.removeprefix("rule_"), []).append(log.stem)
    return out


def test_slurm_campaign_dense_runs_every_nonlocal_rule_as_a_completed_job(tmp_path):
    wf = workflow_copy(tmp_path)
    args = ["--profile", "profiles/slurm-ci", "campaign_dense", "--configfile", str(FEWER_STEPS)]
    dry, _ = snakemake(wf, *args, "-n", timeout=300)
    assert dry.returncode == 0, tail(dry)
    planned = planned_jobs(dry.stdout)
    local = declared_local_rules(wf)
    assert {"run_config", "report", "campaign_dense"} <= local
    remote = {rule: n for rule, n in planned.items() if rule not in local}
    assert "ppo_segment" in remote and "sft" in remote, dry.stdout[-3000:]
    start = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    r, seconds = snakemake(wf, *args, timeout=3000)
    print(f"\n[e2e] slurm campaign_dense (fewer steps): {seconds:.0f} s, exit {r.returncode}")
    assert r.returncode == 0, tail(r)
    m = re.search(r"SLURM run ID: (\S+)", r.stdout + r.stderr)
    assert m, tail(r)
    run_uuid = m[1]
    assert ran_locally(r.stdout + r.stderr) <= local, tail(r)

    small = yaml.safe_load(FEWER_STEPS.read_text())
    check_finished_campaign(
        wf,
        "tiny",
        small["campaign"]["segments"],
        small["campaign"]["steps_per_segment"],
        small["critic_warmup"]["recalibration_rollouts"],
    )

    by_rule = slurm_jobs_by_rule(wf)
    assert {rule: len(jobs) for rule, jobs in by_rule.items()} == remote, (by_rule, remote)
    states: dict[str, tuple[str, str]] = {}
    end = time.time() + 60  # sacct may lag the executor's last status check by a few seconds
    while time.time() < end:
        states = sacct_since(start)
        ids = [j for jobs in by_rule.values() for j in jobs]
        if all(states.get(j, ("", ""))[1] == "COMPLETED" for j in ids):
            break
        time.sleep(2)
    for rule, jobs in sorted(by_rule.items()):
        for job in jobs:
            assert job in states, f"rule {rule}: Slurm job {job} not in sacct since {start}"
            name, state = states[job]
            assert name == run_uuid, f"rule {rule}: job {job} named {name}, not {run_uuid}"
            assert state == "COMPLETED", f"rule {rule}: job {job} is {state}"
    print(
        f"[e2e] Slurm jobs per rule: {', '.join(f'{k}={len(v)}' for k, v in sorted(by_rule.items()))}"
        f"; local rules: {', '.join(sorted(local))}"
    )
