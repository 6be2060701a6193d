"""A verifier that errs runs once more at twice the timeout (t1.verify.verifier.score_retrying:
the agent loop's reward, t1.agent.loop.verify_with_retry, and `t1 oracle`).

.venv/bin/pytest tests/test_verifier_retry.py -q

Real bwrap sandbox, real compartment: the task's only test sleeps longer than the task's
verifier timeout and shorter than twice it, so the first run times out and the second passes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from shared_fixtures import requires_bwrap

from t1.agent.loop import attach_reward
from t1.agent.trajectory import Status, Trajectory
from t1.tasks import load_task
from t1.verify.reward import RewardSpec

ATTACKS = Path(__file__).resolve().parent / "data" / "attacks"
TIMEOUT_S = 4  # the task's verifier timeout; the test sleeps 5 s: the retry has 8 s


def _provisioned() -> bool:
    from t1.sandbox import provision

    return provision.locate() is not None


pytestmark = [
    pytest.mark.integration,
    requires_bwrap,
    pytest.mark.skipif(not _provisioned(), reason="no offline provision cache: run `t1 provision`"),
]


def _slow_task(tmp_path: Path) -> Path:
    d = tmp_path / "slow-verifier"
    shutil.copytree(ATTACKS / "honest", d)
    (d / "tests" / "test_outputs.py").write_text(
        "import time\n\n\ndef test_slow():\n    time.sleep(5)\n"
    )
    toml = d / "task.toml"
    toml.write_text(re.sub(r"\[verifier\]\ntimeout_sec = [0-9.]+", f"[verifier]\ntimeout_sec = {TIMEOUT_S}", toml.read_text()))  # fmt: skip
    return d


@pytest.mark.parametrize("tries", [2, 1], ids=["retried", "once"])
def test_a_verifier_that_timed_out_runs_again_at_twice_the_timeout(tmp_path, monkeypatch, tries):
    """tries=1 is the old behaviour and the negative control: the trajectory is FAILED."""
    from t1.agent import loop
    from t1.tasks.env import open_task_sandbox

    monkeypatch.setattr(loop, "VERIFIER_TRIES", tries)
    task = load_task(_slow_task(tmp_path))
    assert task.verifier_timeout_s == TIMEOUT_S
    traj = Trajectory(task_id=task.id, status=Status.COMPLETED, turns=[])
    with open_task_sandbox(task) as sb:
        attach_reward(traj, task, sb, RewardSpec("dense", 1.0))
    md = traj.metadata
    if tries == 2:
        assert traj.status == Status.COMPLETED, traj.reason
        assert (md["passed"], md["total"], md["resolved"], traj.reward) == (1, 1, True, 1.0)
        assert md["verifier_tries"] == 2 and "timed out" in md["verifier_first_error"]
        assert md["seconds_verifier"] >= TIMEOUT_S + 5
    else:
        assert traj.status == Status.FAILED and "timed out after 4 s" in traj.reason
        assert "verifier_tries" not in md and traj.reward is None


@pytest.mark.parametrize("tries", [2, 1], ids=["retried", "once"])
def test_t1_oracle_retries_a_verifier_that_timed_out(tmp_path, monkeypatch, tries):
    """Pool validation (`t1 oracle`) takes the same retry, so a loaded machine does not reject
    a good task; tries=1 (the negative control) reports the timeout as the row's error."""
    from t1.verify import oracle, verifier

    monkeypatch.setattr(verifier, "VERIFIER_TRIES", tries)
    row = oracle.run_task(_slow_task(tmp_path), agent="noop")
    assert row["verifier_tries"] == tries
    if tries == 2:
        assert row["error"] is None and (row["passed"], row["total"], row["resolved"]) == (
            1,
            1,
            True,
        )
    else:
        assert "timed out" in row["error"] and not row["resolved"]
