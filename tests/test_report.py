"""`t1 report`: each step once (the last attempt, marked when redone) and the run's incidents."""

from __future__ import annotations

from t1.incidents import IncidentLog
from t1.metrics_log import MetricsLog
from t1.report import render


def test_each_step_once_with_redone_marks_and_incidents_listed(tmp_path, monkeypatch):
    run = tmp_path / "run"
    for s in range(3):
        with MetricsLog(run / f"ppo/steps/step_{s:06d}/train", tensorboard=False) as log:
            log.write("ppo_step", s, reward_mean=0.1 * s)
    with MetricsLog(run / "ppo/steps/step_000001/train", tensorboard=False) as log:
        log.write("ppo_step", 1, reward_mean=0.5)  # step 1 redone after a crash
    with MetricsLog(run / "sft/model", tensorboard=False) as log:
        for attempt_steps in ((1, 2, 3), (3, 4)):  # resumed from the step-2 checkpoint
            for s in attempt_steps:
                log.write("sft_step", s, loss=1.0)
    bad = run / "ppo/steps/step_000001/train/ckpt/step_00000002"
    for attempt in ("1", "2"):  # reported by two attempts: listed once, the first's
        monkeypatch.setenv("T1_LOG_ATTEMPT", attempt)
        IncidentLog(run / "ppo/steps/step_000001/train/incidents.jsonl").write(
            "checkpoint_corrupt", path=str(bad), step=2, problem="actor: sha256 mismatch"
        )
    IncidentLog(run / "ppo/steps/step_000002/train/incidents.jsonl").write(
        "checkpoint_fallback", stage="ppo", step=1, path=str(bad.parent), action="redid step 1"
    )
    text = render(run, run / "report.md")
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln[2:3].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 0", "| 1 (redone)", "| 2"]
    assert "| 0.5 |" in rows[1]  # the last attempt's value
    assert "| ppo_step | 3 | 1 |" in text and "| sft_step | 4 | 1 |" in text
    incidents = text.split("## Incidents")[1]
    assert incidents.count("checkpoint_corrupt") == 1
    assert "| checkpoint_corrupt | 1 | 2 |" in incidents  # kind, attempt, step
    assert incidents.count("checkpoint_fallback") == 1 and "redid step 1" in incidents
