"""summary.json's held-out / train split (t1.eval.summary.run_summary) on pool-named evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t1.eval.summary import run_summary
from t1.records import write_json_atomic


def _pool(run: Path, split: str, ids: list[str]) -> None:
    tasks = [{"rank": i, "id": t, "path": f"tasks/{i:05d}-{t}"} for i, t in enumerate(ids)]
    write_json_atomic(run / "pool" / split / "manifest.json", {"tasks": tasks})


def _eval(run: Path, stage: str, resolved: dict[str, bool]) -> None:
    rows = [
        {"task": task, "resolved": ok, "scored": True, "passed": int(ok), "total": 1,
         "reward": float(ok), "turns": 3}
        for task, ok in resolved.items()
    ]  # fmt: skip
    write_json_atomic(
        run / "eval" / stage / "eval.json", {"schema_version": 2, "k": 1, "trajectories": rows}
    )


def test_eval_rows_named_by_eval_pool_directory_split_by_train_pool_id(tmp_path):
    run = tmp_path / "tiny"
    _pool(run, "train", ["copy-file-000", "make-dirs-000"])
    # the eval pool ranks the same tasks differently and adds held-out ones
    _pool(run, "eval", ["make-dirs-006", "copy-file-000", "copy-file-006", "make-dirs-000"])
    names = {f"{i:05d}-{t}": t for i, t in enumerate(
        ["make-dirs-006", "copy-file-000", "copy-file-006", "make-dirs-000"])}  # fmt: skip
    for stage in ("sft", "ppo"):
        _eval(run, stage, {d: t.endswith("000") or stage == "ppo" for d, t in names.items()})
    s = run_summary(run)
    assert s["train"]["sft"]["n"] == 2 and s["train"]["sft"]["resolved"] == 1.0
    assert s["heldout"]["sft"]["n"] == 2 and s["heldout"]["sft"]["resolved"] == 0.0
    assert s["heldout"]["ppo"]["resolved"] == 1.0
    # the guard can fail: without the eval pool's manifest the names match no train id
    (run / "pool" / "eval" / "manifest.json").unlink()
    s = run_summary(run)
    assert s["train"]["sft"] is None and s["heldout"]["sft"]["n"] == 4


def test_an_arm_uses_the_shared_runs_pool_and_sft_evaluation(tmp_path):
    base, arm = tmp_path / "tiny", tmp_path / "tiny-cold"
    _pool(base, "train", ["a"])
    _pool(base, "eval", ["a", "b"])
    _eval(base, "sft", {"00000-a": True, "00001-b": False})
    _eval(arm, "ppo", {"00000-a": True, "00001-b": True})
    s = run_summary(arm, shared=base)
    assert s["train"]["sft"]["resolved"] == 1.0 and s["heldout"]["sft"]["resolved"] == 0.0
    assert s["heldout"]["ppo"]["resolved"] == 1.0
    assert s["heldout"]["sft"]["source"] == str(Path("tiny") / "eval" / "sft" / "eval.json")
    assert json.dumps(s)  # JSON-serializable for summary.json


def test_unseen_name_tasks_are_their_own_split_with_the_same_fields(tmp_path):
    run = tmp_path / "tiny"
    _pool(run, "train", ["copy-file-000"])
    evaluated = ["copy-file-000", "copy-file-004", "copy-file-006", "copy-file-007"]
    _pool(run, "eval", evaluated)
    write_json_atomic(
        run / "tasks" / "families" / "families.json",
        {"train": ["copy-file-000"], "heldout": ["copy-file-004"],
         "heldout_unseen": ["copy-file-006", "copy-file-007"]},
    )  # fmt: skip
    dirs = {f"{i:05d}-{t}": t for i, t in enumerate(evaluated)}
    _eval(run, "sft", {d: t in ("copy-file-000", "copy-file-004") for d, t in dirs.items()})
    _eval(run, "ppo", {d: t != "copy-file-007" for d, t in dirs.items()})
    s = run_summary(run)
    assert set(s["heldout_unseen"]["sft"]) == set(s["heldout"]["sft"])  # the same fields
    assert s["heldout_unseen"]["sft"]["n"] == 2 and s["heldout_unseen"]["sft"]["resolved"] == 0.0
    assert s["heldout_unseen"]["ppo"]["resolved"] == 0.5
    assert s["heldout_unseen"]["ppo"]["tasks"] == 2
    assert s["heldout"]["sft"]["n"] == 1 and s["heldout"]["sft"]["resolved"] == 1.0
    assert s["train"]["sft"]["n"] == 1
    # the split can fail: without the family split the unseen tasks count as held-out
    (run / "tasks" / "families" / "families.json").unlink()
    s = run_summary(run)
    assert s["heldout_unseen"]["sft"] is None and s["heldout"]["sft"]["n"] == 3
    assert any(n.startswith("heldout_unseen: no family split") for n in s["notes"])


def test_ppo_vs_sft_is_the_two_proportion_test_per_split(tmp_path):
    run = tmp_path / "tiny"
    held = [f"t{i:03d}" for i in range(100)]
    _pool(run, "train", ["train-task"])
    _pool(run, "eval", held)
    dirs = [f"{i:05d}-{t}" for i, t in enumerate(held)]
    _eval(run, "sft", {d: i < 50 for i, d in enumerate(dirs)})  # 50 of 100
    _eval(run, "ppo", {d: i < 65 for i, d in enumerate(dirs)})  # 65 of 100
    gap = run_summary(run)["heldout"]["ppo_vs_sft"]
    # by hand: pooled 0.575, se = sqrt(.575 * .425 * 2 / 100) = 0.06991, z = 0.15 / se = 2.1456
    assert gap["points"] == 15.0 and abs(gap["z"] - 2.1456) < 1e-3
    assert abs(gap["p"] - 0.0319) < 1e-3  # two-sided
    # paired by task: PPO resolves 15 tasks SFT did not and loses none: p = 2 / 2**15
    assert gap["paired"]["tasks"] == 100
    assert (gap["paired"]["sft_only"], gap["paired"]["ppo_only"]) == (0, 15)
    assert gap["paired"]["p"] == 2 / 2**15
    _eval(run, "ppo", {d: i < 55 for i, d in enumerate(dirs)})  # +5 points: not significant
    assert run_summary(run)["heldout"]["ppo_vs_sft"]["p"] > 0.05
    # the same 65 of 100 resolved, 30 of them tasks SFT failed and 15 SFT's it lost: the
    # two-proportion test sees +15 points; the paired one, 30 against 15 discordant tasks
    _eval(run, "ppo", {d: 15 <= i < 80 for i, d in enumerate(dirs)})
    gap = run_summary(run)["heldout"]["ppo_vs_sft"]
    assert abs(gap["p"] - 0.0319) < 1e-3
    assert (gap["paired"]["sft_only"], gap["paired"]["ppo_only"]) == (15, 30)
    assert 0.03 < gap["paired"]["p"] < 0.04  # exact binomial, 2 * P(X <= 15 | 45, 1/2) = 0.036
    (run / "eval" / "ppo" / "eval.json").unlink()
    assert run_summary(run)["heldout"]["ppo_vs_sft"] is None  # one stage: no test


def test_by_family_counts_each_family_apart_so_a_collapse_shows(tmp_path):
    from t1.eval.report import family_table

    run = tmp_path / "tiny"
    held = [f"count-lines-{i:03d}" for i in range(4)] + [f"copy-file-{i:03d}" for i in range(4)]
    _pool(run, "train", ["make-dirs-000"])
    _pool(run, "eval", [*held, "stats-debug"])
    write_json_atomic(
        run / "tasks" / "families" / "families.json",
        {"families": ["copy-file", "count-lines"], "train": [], "heldout": held},
    )
    dirs = {f"{i:05d}-{t}": t for i, t in enumerate([*held, "stats-debug"])}
    _eval(run, "sft", {d: t.startswith("count") for d, t in dirs.items()})  # 4 of 9
    _eval(run, "ppo", {d: t.startswith("copy") for d, t in dirs.items()})  # 4 of 9
    s = run_summary(run)
    assert s["heldout"]["sft"]["resolved_count"] == s["heldout"]["ppo"]["resolved_count"] == 4
    # the total holds; the families do not, and a task outside t1 families is in none
    assert s["heldout"]["sft"]["by_family"] == {
        "copy-file": {"resolved_count": 0, "n": 4}, "count-lines": {"resolved_count": 4, "n": 4}
    }  # fmt: skip
    assert s["heldout"]["ppo"]["by_family"]["count-lines"] == {"resolved_count": 0, "n": 4}
    table = family_table(s)
    assert table.rows == [["copy-file", "0/4 → 4/4", "- → -", "- → -"],
                          ["count-lines", "4/4 → 0/4", "- → -", "- → -"]]  # fmt: skip
    (run / "tasks" / "families" / "families.json").unlink()
    assert run_summary(run)["heldout"]["sft"]["by_family"] == {}
    assert family_table(run_summary(run)) is None


def test_mcnemar_exact_by_hand():
    from t1.eval.stats import mcnemar_exact

    assert mcnemar_exact(0, 0)["p"] == 1.0  # no discordant task: nothing to tell apart
    assert mcnemar_exact(5, 5)["p"] == 1.0
    assert mcnemar_exact(0, 3)["p"] == 0.25  # 2 * (1/2)**3
    assert mcnemar_exact(2, 10)["p"] == mcnemar_exact(10, 2)["p"]  # two-sided: symmetric
    assert abs(mcnemar_exact(2, 10)["p"] - 2 * (1 + 12 + 66) / 2**12) < 1e-12
    with pytest.raises(ValueError, match="discordant"):
        mcnemar_exact(-1, 2)


def test_paired_test_needs_one_trajectory_per_task_in_both_stages(tmp_path):
    from t1.eval.summary import ppo_vs_sft

    split = {"sft": {"resolved": 0.5, "resolved_count": 1, "n": 2},
             "ppo": {"resolved": 1.0, "resolved_count": 2, "n": 2}}  # fmt: skip
    both = {"sft": [("a", True), ("b", False)], "ppo": [("a", True), ("b", True)]}
    assert ppo_vs_sft(split, both)["paired"]["ppo_only"] == 1
    k2 = {"sft": [("a", True), ("a", False)], "ppo": [("a", True), ("a", True)]}
    gap = ppo_vs_sft(split, k2)
    assert gap["paired"] is None and "k > 1" in gap["paired_note"]
    other = {"sft": [("a", True), ("b", False)], "ppo": [("a", True), ("c", True)]}
    gap = ppo_vs_sft(split, other)
    assert gap["paired"] is None and "different tasks" in gap["paired_note"]
