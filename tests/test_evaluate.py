"""`t1 evaluate`: the figures of known rows, and real runs on both task layouts.

    pytest tests/test_evaluate.py -q

The unit tests feed hand-made trajectory rows (2 tasks x 2 runs) through the summary and
compare with hand-computed rates, Wilson bounds and pass@k. The integration test runs the
command in this process on one v1 (word-frequency) and one v2 (stats-debug) seed task: the
reference solutions (`--expert`, every task resolved) and a real tiny policy (a fresh tiny MoE
through the local engine, k = 2: resolves nothing), so the same metric moves from 100% to 0%.
"""

from __future__ import annotations

import json

import pytest
from agent_helpers import EXAMPLES, random_policy
from shared_fixtures import requires_bwrap

from t1.agent.tokenizer_train import bpe_tokenizer
from t1.cli import main as t1_main
from t1.eval.evaluate import markdown, summarize
from t1.eval.stats import wilson_interval
from t1.eval.summary import STAGES, block, run_summary
from t1.model.policy import save_policy
from t1.rollout.collect import load_tasks

TASKS = [str(EXAMPLES / "word-frequency"), str(EXAMPLES / "stats-debug")]  # v1, v2


def _row(task, resolved, passed=None, total=8, scored=True):
    return {
        "task": task,
        "status": "COMPLETED" if scored else "FAILED",
        "reason": "",
        "scored": scored,
        "resolved": resolved,
        "passed": passed if scored else None,
        "total": total if scored else None,
        "reward": (passed or 0) / 10 if scored else None,
        "turns": 2,
    }


ROWS = [
    _row("word-frequency", True, 8),
    _row("word-frequency", False, 4),
    _row("stats-debug", False, 9, total=13),
    _row("stats-debug", False, scored=False),  # the sandbox died: launched, unresolved, unscored
]


def test_block_matches_hand_computed_figures():
    b = block(ROWS, k=2)
    assert (b["tasks"], b["trajectories"], b["resolved"], b["unscored"]) == (2, 4, 1, 1)
    assert b["resolved_rate"] == 0.25
    assert b["ci95"] == pytest.approx([0.045586, 0.699358], abs=1e-5) == list(wilson_interval(1, 4))
    # pass@1 per task 1/2 and 0/2; pass@2: word-frequency 1 - C(1,2)/C(2,2) = 1, stats-debug 0
    assert (b["pass_at_1"], b["pass_at_k"]) == (0.25, 0.5)
    assert b["mean_assertions_passed"] == pytest.approx(7.0)  # (8 + 4 + 9) / 3 scored
    assert b["mean_passed_fraction"] == pytest.approx((1 + 0.5 + 9 / 13) / 3)


def test_pass_at_k_is_none_for_tasks_run_fewer_than_k_times():
    b = block(ROWS[:1], k=2)
    assert b["pass_at_1"] == 1.0 and b["pass_at_k"] is None


def test_summary_groups_by_category_and_difficulty_of_both_layouts():
    tasks = {t.id: t for t in load_tasks(TASKS)}
    assert {t.layout for t in tasks.values()} == {"v1", "v2"}
    s = summarize(ROWS, tasks, k=2)
    assert set(s["by_category"]) == {"scripting", "debugging"}
    assert s["by_category"]["scripting"]["resolved_rate"] == 0.5
    assert s["by_category"]["debugging"]["resolved"] == 0
    assert s["by_difficulty"]["medium"]["trajectories"] == 4
    assert s["by_status"] == {"COMPLETED": 3, "FAILED": 1} and s["verifier_retried"] == 0
    retried = [dict(ROWS[0], verifier_tries=2), *ROWS[1:]]
    assert summarize(retried, tasks, k=2)["verifier_retried"] == 1


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    tok = bpe_tokenizer()
    tok.save_pretrained(root / "tokenizer")
    return root, tok


@pytest.mark.integration
@pytest.mark.slow  # about 45 s on 2 loaded cores: 2 expert runs, 4 policy runs
@requires_bwrap
def test_evaluate_expert_then_a_tiny_policy_on_v1_and_v2_tasks(tokenizer_dir, capsys):
    root, tok = tokenizer_dir
    cfg = root / "cfg.yaml"
    cfg.write_text(
        json.dumps(
            {
                "run": {"name": "t", "results_dir": str(root / "results"), "threads": 2},
                "engine": {"max_new_tokens": 16, "max_batch": 4},
                "agent": {"max_turns": 1, "context_tokens": 2048},
                "rollout": {"workers": 2},
                "reward": {"scale": 10},
            }
        )
    )
    common = ["--config", str(cfg), "--tokenizer", str(root / "tokenizer"), "--tasks", *TASKS]

    # the reference solutions resolve both tasks; both outputs written
    out = root / "expert"
    assert t1_main(["evaluate", "--expert", *common, "--out", str(out)]) == 0
    doc = json.loads((out / "eval.json").read_text())
    assert doc["schema_version"] == 2 and doc["status"] == "complete" and doc["k"] == 1
    o = doc["summary"]["overall"]
    assert (o["trajectories"], o["resolved"], o["resolved_rate"]) == (2, 2, 1.0)
    assert o["ci95"] == pytest.approx(list(wilson_interval(2, 2)))
    assert {t["layout"] for t in doc["tasks"]} == {"v1", "v2"}
    assert {t["task"]: t["mean_assertions_passed"] for t in doc["tasks"]} == {
        "word-frequency": 8,
        "stats-debug": 13,
    }
    md = (out / "eval.md").read_text()
    assert md == markdown(doc) and "| scripting | 1 | 1 | 1 | 100.0% |" in md

    # a fresh tiny MoE, each task twice: nothing resolved, every run counted
    save_policy(random_policy(tok), root / "policy")
    js = root / "policy.json"
    rc = t1_main(
        ["evaluate", "--policy", str(root / "policy"), *common, "--k", "2", "--json", str(js)]
    )
    assert rc == 0
    doc = json.loads(js.read_text())
    o = doc["summary"]["overall"]
    assert (o["tasks"], o["trajectories"], o["resolved"], o["k"]) == (2, 4, 0, 2)
    assert (o["resolved_rate"], o["pass_at_1"], o["pass_at_k"]) == (0.0, 0.0, 0.0)
    assert o["ci95"] == pytest.approx([0.0, 0.489891], abs=1e-5)  # Wilson 0/4
    assert len(doc["trajectories"]) == 4 and all(t["runs"] == 2 for t in doc["tasks"])
    # every task passes some assertions before any action (its no-op score), none all of them
    assert o["scored"] + o["unscored"] == 4
    assert o["scored"] == 0 or 0 <= o["mean_passed_fraction"] < 1
    assert "pass@2" in capsys.readouterr().out


def test_evaluate_refuses_policy_and_expert_together(tokenizer_dir, capsys):
    root, _ = tokenizer_dir
    assert t1_main(["evaluate", "--expert", "--policy", str(root), "--tasks", *TASKS]) == 2
    assert t1_main(["evaluate", "--tasks", *TASKS]) == 2
    assert "--policy DIR or --expert" in capsys.readouterr().err


# --------------------------------------------------------------------------- summary.json


def _eval_doc(rows, k=1, stage="sft"):
    return {"schema_version": 2, "status": "complete", "label": stage, "k": k,
            "summary": {"overall": block(rows, k)}, "trajectories": rows}  # fmt: skip


def _run_dir(tmp_path, train_ids, evals):
    run = tmp_path / "tiny"
    (run / "pool" / "train").mkdir(parents=True)
    (run / "pool" / "train" / "manifest.json").write_text(
        json.dumps(
            {"schema_version": 1, "status": "complete", "tasks": [{"id": i} for i in train_ids]}
        )
    )
    for stage, doc in evals.items():
        (run / "eval" / stage).mkdir(parents=True)
        (run / "eval" / stage / "eval.json").write_text(json.dumps(doc))
    return run


def test_summary_json_splits_held_out_from_train_pool_tasks_and_marks_what_is_missing(tmp_path):
    rows = [
        _row("seen", True, 8),
        _row("seen", False, 2),
        _row("new", True, 8),
        _row("new", True, 8),
    ]
    run = _run_dir(tmp_path, ["seen", "other"], {"sft": _eval_doc(rows, k=2)})
    s = run_summary(run)
    assert s["heldout"]["sft"] == {"resolved": 1.0, "resolved_count": 2, "n": 2, "tasks": 1,
                                   "k": 2, "pass_at_k": 1.0, "ci95": list(wilson_interval(2, 2)),
                                   "source": "eval/sft/eval.json", "by_family": {}}  # fmt: skip
    t = s["train"]["sft"]
    assert (t["resolved"], t["n"], t["pass_at_k"]) == (0.5, 2, 1.0)
    assert t["ci95"] == pytest.approx([0.094531, 0.905469], abs=1e-5)  # Wilson 1/2
    # no PPO evaluation: null, never a number, and a note that says so
    assert s["heldout"]["ppo"] is None and s["train"]["ppo"] is None
    assert sum(n.endswith("no evaluation (eval/ppo/eval.json missing)") for n in s["notes"]) == 3
    # no t1 families split in this run; no PPO evaluation, so no PPO-vs-SFT test either
    assert s["heldout_unseen"] == {"sft": None, "ppo": None, "ppo_vs_sft": None}
    assert s["heldout"]["ppo_vs_sft"] is None
    assert any(n.startswith("heldout_unseen: no family split") for n in s["notes"])


def test_summary_json_has_null_held_out_when_the_eval_pool_is_the_train_pool(tmp_path):
    rows = [_row("seen", True, 8), _row("also-seen", False, 3)]
    run = _run_dir(tmp_path, ["seen", "also-seen"], {s: _eval_doc(rows, stage=s) for s in STAGES})
    s = run_summary(run)
    assert s["heldout"] == {"sft": None, "ppo": None, "ppo_vs_sft": None}
    assert s["train"]["ppo_vs_sft"]["points"] == 0.0  # both evaluated the same rows
    assert s["train"]["ppo"]["resolved"] == 0.5 and s["train"]["ppo"]["n"] == 2
    assert sum("lies outside the train pool" in n for n in s["notes"]) == 2


def test_t1_report_writes_summary_json_beside_the_report(tmp_path):
    rows = [_row("seen", True, 8)]
    run = _run_dir(tmp_path, ["seen"], {s: _eval_doc(rows, stage=s) for s in STAGES})
    assert t1_main(["report", "--run-dir", str(run)]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["schema_version"] == 1 and s["train"]["sft"]["resolved"] == 1.0
    assert s["heldout"]["sft"] is None and set(s) >= {"heldout", "train", "notes"}
    assert "| sft | 1 | 100.0% | [20.7%, 100.0%] |" in (run / "report.md").read_text()


def test_summary_json_without_a_train_pool_splits_nothing_and_says_so(tmp_path):
    run = _run_dir(tmp_path, [], {"sft": _eval_doc([_row("seen", True, 8)])})
    (run / "pool" / "train" / "manifest.json").unlink()
    s = run_summary(run)
    assert s["heldout"] == s["train"] == {"sft": None, "ppo": None, "ppo_vs_sft": None}
    assert any("no train pool" in n for n in s["notes"])
    assert {n.split(":")[0] for n in s["notes"][1:]} == {
        "heldout_unseen", "heldout.sft", "heldout_unseen.sft", "train.sft",
        "heldout.ppo", "heldout_unseen.ppo", "train.ppo"
    }  # fmt: skip
