"""`t1 report`: each step once (the last attempt, marked when redone), the run's incidents, and
every plot with the caption saying what a healthy run looks like.

    .venv/bin/pytest tests/test_report.py -q

`make_run` builds a run directory the way a campaign leaves it (metrics.jsonl events written
with t1.store.metrics_log, eval.json documents whose figures come from t1.eval.summary.block, the
train pool's manifest, incidents, a TITO audit); tests/test_report_html.py reuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

from t1.cli import main as t1_main
from t1.eval.report import render
from t1.eval.report_plots import FIGURES
from t1.eval.summary import block
from t1.store.incidents import IncidentLog
from t1.store.metrics_log import MetricsLog

# A task id and a category no page may print raw (tests/test_report_html.py checks the escaping).
EVIL_TASK = '<img src=x onerror="alert(1)">&amp;-task'
EVIL_CATEGORY = "a<b>&c $HOME"
TASKS = {  # task id -> (category, difficulty, in the train pool)
    "t-csv": ("data-processing", "easy", True),
    "t-git": ("version-control", "medium", True),
    "t-nginx": ("system-administration", "hard", False),
    EVIL_TASK: (EVIL_CATEGORY, "easy", False),
}


def _rows(resolved: dict[str, list[bool]]) -> list[dict]:
    return [
        {"task": t, "status": "COMPLETED", "reason": "final answer", "scored": True,
         "resolved": r, "passed": 8 if r else 3, "total": 8, "reward": 1.0 if r else 0.375,
         "turns": 3}
        for t, runs in resolved.items() for r in runs
    ]  # fmt: skip


def eval_doc(label: str, resolved: dict[str, list[bool]], k: int = 2) -> dict:
    """An eval.json (schema 2) of these runs per task, summarized as t1 evaluate does."""
    rows = _rows(resolved)
    cats: dict[str, list[dict]] = {}
    for r in rows:
        cats.setdefault(TASKS[r["task"]][0], []).append(r)
    tasks = []
    for t, (cat, diff, _) in TASKS.items():
        b = block([r for r in rows if r["task"] == t], k)
        tasks.append({"task": t, "path": f"/pool/{t}", "layout": "v2", "category": cat,
                      "difficulty": diff, "runs": b["trajectories"], "resolved": b["resolved"],
                      "pass_at_1": b["pass_at_1"], "pass_at_k": b["pass_at_k"],
                      "mean_assertions_passed": b["mean_assertions_passed"],
                      "unscored": b["unscored"]})  # fmt: skip
    return {
        "schema_version": 2, "status": "complete", "label": label, "policy": f"/m/{label}",
        "k": k, "reward": {"kind": "dense", "scale": 8.0, "subtract_noop": False},
        "seconds": 1.0,
        "summary": {"overall": block(rows, k),
                    "by_category": {c: block(v, k) for c, v in sorted(cats.items())}},
        "tasks": tasks, "trajectories": rows,
    }  # fmt: skip


def make_run(root: Path, steps: int = 4) -> Path:
    """A finished run directory under `root` with every kind of record the report reads."""
    run = root / "tiny"
    (run / "pool" / "train").mkdir(parents=True)
    train = [{"id": t} for t, (_, _, inside) in TASKS.items() if inside]
    (run / "pool" / "train" / "manifest.json").write_text(json.dumps({"tasks": train}))
    (run / "pool" / "eval").mkdir(parents=True)
    offline = {"checked": 5, "network": "never", "not_ready_count": 1,
               "not_ready": [{"task": EVIL_TASK, "missing": ["pip grpcio==1.73.0"]}]}  # fmt: skip
    (run / "pool" / "eval" / "manifest.json").write_text(json.dumps({"offline": offline}))
    (run / "manifest.json").write_text(json.dumps({"reward": {"kind": "dense", "scale": 8.0}}))
    for s in range(steps):
        with MetricsLog(run / f"ppo/steps/step_{s:06d}/train", tensorboard=False) as log:
            log.write(
                "ppo_step", s, reward_mean=0.2 + 0.1 * s, resolved_rate=0.1 * s,
                gap=0.002 + 0.0001 * s, gap_ema=0.002 + 0.00005 * s,
                explained_variance=-0.1 + 0.2 * s, value_loss=0.4 / (s + 1),
                policy_loss=None if s < 2 else 0.05, clip_fraction=None if s < 2 else 0.08,
                entropy=8.0 - 0.1 * s, tokens_per_s=1800.0, step_time_s=4.0,
                resolved_by_category={"data-processing": 0.1 * s},
                oversampling_launched=10, oversampling_admitted=8, oversampling_dropped=2,
                truncated=s % 2, drift_rate=0.0, placeholder_rate=0.001, placeholders_in_loss=0,
            )  # fmt: skip
    with MetricsLog(run / "sft/model", tensorboard=False) as log:
        for s in range(3):
            log.write("sft_step", s, loss=1.0 - 0.1 * s)
    IncidentLog(run / "ppo/iter_00000/incidents.jsonl").write(
        "child_restarted", child="engine", problem=f"task {EVIL_TASK} hung", step=1
    )
    sft = {"t-csv": [True, False], "t-git": [False, False], "t-nginx": [False, False],
           EVIL_TASK: [True, False]}  # fmt: skip
    ppo = {"t-csv": [True, True], "t-git": [True, False], "t-nginx": [True, False],
           EVIL_TASK: [True, True]}  # fmt: skip
    for label, resolved in (("sft", sft), ("ppo", ppo)):
        (run / "eval" / label).mkdir(parents=True)
        (run / "eval" / label / "eval.json").write_text(json.dumps(eval_doc(label, resolved)))
    audit = {"trajectories": 8, "loss_tokens": 1000, "drift_tokens": 0, "drift_rate": 0.0,
             "placeholder_rate": 0.001, "placeholder_in_loss": 0,
             "relations": {"strict": 10, "normalized": 0, "retokenized": 0, "split": 0}}  # fmt: skip
    (run / "ppo/steps/step_000000/rollout").mkdir(parents=True)
    (run / "ppo/steps/step_000000/rollout/tito_audit.json").write_text(json.dumps(audit))
    return run


def _section(text: str, title: str) -> str:
    return text.split(f"\n{title}\n")[1].split("\n## ")[0]


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
    table = text.split("## PPO steps")[1].split("\n\n")[1]  # as tests/e2e read it
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and ln[2:3].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 0", "| 1 (redone)", "| 2"]
    assert "| 0.5 |" in rows[1]  # the last attempt's value
    assert "| ppo_step | 3 | 1 |" in text and "| sft_step | 4 | 1 |" in text
    incidents = text.split("## Incidents")[1]
    assert incidents.count("checkpoint_corrupt") == 1
    assert "| checkpoint_corrupt | 1 | 2 |" in incidents  # kind, attempt, step
    assert incidents.count("checkpoint_fallback") == 1 and "redid step 1" in incidents


def test_every_plot_is_written_and_shown_with_its_caption(tmp_path):
    run = make_run(tmp_path)
    text = render(run, run / "report.md")
    for name, p in FIGURES.items():
        png = run / f"report_{name}.png"
        assert png.read_bytes().startswith(b"\x89PNG"), f"{png} missing or not a PNG"
        assert f"![report_{name}](report_{name}.png)\n\n*{p.title}.* {p.caption}" in text, name
        assert "Healthy" in p.caption, f"{name}: the caption says nothing of a healthy run"
    # the metrics table stays first under its heading (tests/e2e read it so)
    assert text.split("## PPO steps")[1].split("\n\n")[1].startswith("| step | reward_mean |")
    rollouts = _section(text, "### Rollouts and TITO per step")
    assert "| step | oversampling_launched | oversampling_admitted | oversampling_dropped |" in (
        rollouts
    )
    assert "| 3 | 10 | 8 | 2 | 1 | 0 | 0.001 | 0 |" in rollouts
    summary = _section(text, "## Summary")
    assert "| heldout | ppo | 75.0% |" in summary and "| train | sft | 25.0% |" in summary
    evals = _section(text, "## Evaluations")
    assert "| data-processing | sft | 2 | 1 | 50.0% |" in evals
    assert "| data-processing | ppo | 2 | 2 | 100.0% |" in evals
    assert "| t-git | version-control | medium | 0/2 | 1/2 |" in evals  # sft first, then ppo
    assert "## TITO audit (ppo/steps/step_000000/rollout)" in text


def test_a_plot_without_data_is_left_out_with_its_caption(tmp_path):
    run = make_run(tmp_path)
    for p in (run / "eval").rglob("eval.json"):  # no categories: no category bars
        doc = json.loads(p.read_text())
        del doc["summary"]["by_category"]
        p.write_text(json.dumps(doc))
    text = render(run, run / "report.md")
    assert "report_categories" not in text and FIGURES["categories"].caption not in text
    assert not (run / "report_categories.png").exists()
    assert "report_gap.png" in text


def test_t1_report_writes_markdown_html_and_summary(tmp_path, capsys):
    run = make_run(tmp_path)
    assert t1_main(["report", "--run-dir", str(run)]) == 0  # the flags the workflow gives
    for name in ("report.md", "report.html", "summary.json"):
        assert (run / name).is_file(), name
    assert json.loads((run / "summary.json").read_text())["train"]["ppo"]["resolved"] == 0.75
    out = tmp_path / "elsewhere" / "r.md"
    assert t1_main(["report", "--run-dir", str(run), "--out", str(out)]) == 0
    assert out.is_file() and out.with_suffix(".html").is_file()  # the page follows --out
    assert (out.parent / "r_gap.png").is_file()
    page = tmp_path / "page" / "x.html"
    assert t1_main(["report", "--run-dir", str(run), "--html", str(page)]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")


def test_tampered_runs_and_hackable_verifiers_are_counted(tmp_path):
    run = tmp_path / "run"
    for i in range(2):
        IncidentLog(run / "ppo/steps/step_000000/rollout/incidents.jsonl").write(
            "verifier_tampered",
            path=f"trajectories/000{i}-t",
            problem="names differ",
            action="scored as the no-op",
        )
    pool = run / "pool" / "train"
    pool.mkdir(parents=True)
    (pool / "manifest.json").write_text(json.dumps({
        "counts": {"kept": 5, "imports_agent_code": 2, "hack_checked": 2, "hackable": 1},
        "hackable": [{"id": "weak", "path": "tasks/00001-weak", "hacks": ["always-equal"],
                      "scores": {"noop": 0.0, "always-equal": 1.0, "exit-0": 0.0}}],
        "tasks": [],
    }))  # fmt: skip
    text = render(run, run / "report.md")
    section = text.split("## Verifier integrity")[1]
    assert "Tampered verifier runs (scored as the no-op): 2." in section
    assert (
        "2 of 5 verifiers import agent-writable code, 2 checked against the hacks, 1 hackable"
        in section
    )
    assert "| train | weak | always-equal |" in section and "always-equal 1" in section


def test_the_unseen_name_split_has_its_rows_in_the_summary(tmp_path):
    run = make_run(tmp_path)
    families = run / "tasks" / "families"
    families.mkdir(parents=True)
    (families / "families.json").write_text(json.dumps({"heldout_unseen": ["t-nginx"]}))
    text = render(run, run / "report.md")
    summary = _section(text, "## Summary")
    assert "| heldout_unseen | sft | 0.0% |" in summary  # t-nginx: 0/2 after SFT, 1/2 after PPO
    assert "| heldout_unseen | ppo | 50.0% |" in summary
    assert "| heldout | ppo | 100.0% |" in summary  # the other held-out task alone: 2/2
    assert "`heldout_unseen` = family tasks whose every name" in summary
    assert t1_main(["report", "--run-dir", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "<td>heldout_unseen</td>" in page and "<code>heldout_unseen</code>" in page
    s = json.loads((run / "summary.json").read_text())
    assert s["heldout_unseen"]["ppo"]["n"] == 2 and s["heldout"]["ppo"]["tasks"] == 1
