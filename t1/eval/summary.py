"""The figures of an evaluation's trajectory rows, and a campaign run's summary.json.

    from t1.eval.summary import block, run_summary
    block(rows, k=4)                      # resolved rate, Wilson ci95, pass@1, pass@k, ...
    run_summary(Path("results/tiny"))     # what `t1 report` writes as results/tiny/summary.json

`t1 evaluate` (t1/eval/evaluate.py) writes one row per trajectory into eval.json and summarizes
groups of rows with `block`; `t1 report` (t1/eval/report.py) writes `run_summary` beside the
report. The math (Wilson score interval, unbiased pass@k) is t1/eval/stats.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from t1.eval.stats import mcnemar_exact, mean_pass_at_k, two_proportion_test, wilson_interval

STAGES = ("sft", "ppo")
SPLITS = ("heldout", "train")  # the plot's groups (t1.eval.report_plots)
UNSEEN = "heldout_unseen"  # family instances named from words no training stage holds
REPORTED_SPLITS = ("heldout", UNSEEN, "train")  # summary.json's splits, in the report's order
FAMILIES_JSON = Path("tasks") / "families" / "families.json"  # t1 families, under the run


def block(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """The figures of a group of trajectory rows (t1 evaluate's; t1/eval/evaluate.py lists them).

    Every row counts in `trajectories` and the resolved rate (an unscored one as unresolved);
    assertion and reward means are over the scored rows; pass@k over tasks run >= k times."""
    n = len(rows)
    resolved = sum(r["resolved"] for r in rows)
    scored = [r for r in rows if r["scored"]]
    per_task: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        per_task[r["task"]].append(r["resolved"])
    counts = [(len(v), sum(v)) for v in per_task.values()]
    full = [(m, c) for m, c in counts if m >= k]  # a task with fewer than k runs has no pass@k

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return {
        "tasks": len(per_task),
        "trajectories": n,
        "resolved": resolved,
        "resolved_rate": resolved / n if n else None,
        "ci95": list(wilson_interval(resolved, n)) if n else None,
        "pass_at_1": mean_pass_at_k(counts, 1) if counts else None,
        "pass_at_k": mean_pass_at_k(full, k) if full else None,
        "k": k,
        "scored": len(scored),
        "unscored": n - len(scored),
        "mean_assertions_passed": mean([r["passed"] for r in scored]),
        "mean_passed_fraction": mean([r["passed"] / r["total"] for r in scored]),
        "mean_reward": mean([r["reward"] for r in scored]),
        "mean_turns": mean([r["turns"] for r in rows]),
    }


def rows_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Trajectory rows of an eval.json: schema 2's `trajectories`, schema 1's `tasks`."""
    rows = doc.get("trajectories") if doc.get("schema_version", 1) >= 2 else doc.get("tasks")
    out = []
    for r in rows or []:
        scored = r.get("scored", r.get("passed") is not None and bool(r.get("total")))
        out.append({"turns": 0, "reward": None, **r, "scored": scored})
    return out


def _shown(path: Path, run_dir: Path) -> str:
    """`path` relative to the run directory, or to the results directory for a shared run's."""
    for root in (run_dir, run_dir.parent):
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return str(path)


def run_summary(run_dir: Path, shared: Path | None = None) -> dict[str, Any]:
    """`summary.json` of a campaign run, for scripts: per split and stage, from eval records.

    For `heldout`, `heldout_unseen` and `train`, each of `sft` and `ppo`: {resolved (rate),
    resolved_count, n (trajectories), tasks, ci95 [low, high] (Wilson), pass_at_k, k, source,
    by_family {family: {resolved_count, n}} over t1 families' tasks},
    or null when the run has no such evaluation, with a `notes` entry saying why; and
    `ppo_vs_sft`: {points, z, p, test, paired} (`ppo_vs_sft`), null unless both were
    evaluated. A trajectory counts for
    `train` when its task id is in the run's train pool (pool/train/manifest.json), for
    `heldout_unseen` when it is in the `heldout_unseen` list of RUN/tasks/families/families.json
    (t1 families: names the policy never saw in any stage), else for `heldout`; the records
    are RUN/eval/<stage>/eval.json (t1 evaluate, workflow/rules/evaluate.smk).

    `shared`: the run an ablation arm shares its upstream stages with (campaign.runs): its
    train pool, and its SFT evaluation where the arm has none of its own."""
    from t1.tasks.pool import MANIFEST

    notes: list[str] = []
    home = Path(shared) if shared else run_dir
    train_manifest = home / "pool" / "train" / MANIFEST
    train_ids: set[str] | None = None
    if train_manifest.is_file():
        train_ids = {str(t["id"]) for t in json.loads(train_manifest.read_text())["tasks"]}
    # an evaluation names a task by its directory in the eval pool (`00003-copy-file-000`, the
    # pool's rank first); the pools' manifests map that directory to the task's id
    task_id: dict[str, str] = {}
    eval_manifest = home / "pool" / "eval" / MANIFEST
    if eval_manifest.is_file():
        task_id = {
            Path(t["path"]).name: str(t["id"])
            for t in json.loads(eval_manifest.read_text()).get("tasks", [])
            if t.get("path") and t.get("id")
        }
    else:
        notes.append(f"no train pool ({train_manifest} missing): no run can be split")
    unseen_ids, family_of = _family_split(home / FAMILIES_JSON, notes)
    out: dict[str, Any] = {split: dict.fromkeys(STAGES) for split in REPORTED_SPLITS}
    outcomes: dict[str, dict[str, list[tuple[str, bool]]]] = {s: {} for s in REPORTED_SPLITS}
    for stage in STAGES:
        path = run_dir / "eval" / stage / "eval.json"
        if not path.is_file() and shared:
            path = Path(shared) / "eval" / stage / "eval.json"
        if not path.is_file():
            notes += [
                f"{sp}.{stage}: no evaluation ({_shown(path, run_dir)} missing)"
                for sp in REPORTED_SPLITS
            ]
            continue
        doc = json.loads(path.read_text())
        k = int(doc.get("k", 1))
        rows = rows_of(doc)
        if train_ids is None:
            notes += [f"{sp}.{stage}: not split (no train pool)" for sp in REPORTED_SPLITS]
            continue
        rows = [dict(r, task=task_id.get(r["task"], r["task"])) for r in rows]
        parts = {
            "train": [r for r in rows if r["task"] in train_ids],
            UNSEEN: [r for r in rows if r["task"] in unseen_ids and r["task"] not in train_ids],
            "heldout": [r for r in rows if r["task"] not in train_ids | unseen_ids],
        }
        for split, part in parts.items():
            if not part and split == UNSEEN:
                notes.append(
                    f"{UNSEEN}.{stage}: none of the {len(unseen_ids)} unseen-name family tasks "
                    f"is in {_shown(path, run_dir)}"
                )
                continue
            if not part:
                what = "outside" if split == "heldout" else "inside"
                notes.append(
                    f"{split}.{stage}: none of the {len({r['task'] for r in rows})} tasks "
                    f"evaluated in {_shown(path, run_dir)} lies {what} the train pool"
                    + (" (tasks.eval_dirs overlaps tasks.train_dirs)" if split == "heldout" else "")
                )
                continue
            b = block(part, k)
            outcomes[split][stage] = [(r["task"], bool(r["resolved"])) for r in part]
            out[split][stage] = {
                "resolved": b["resolved_rate"],
                "resolved_count": b["resolved"],
                "n": b["trajectories"],
                "tasks": b["tasks"],
                "ci95": b["ci95"],
                "pass_at_k": b["pass_at_k"],
                "k": k,
                "source": _shown(path, run_dir),
                "by_family": by_family(part, family_of),
            }
            if split == "train":
                notes.append(
                    f"train.{stage}: {b['tasks']} of the train pool's {len(train_ids)} tasks "
                    f"(those of the eval pool that are also in the train pool)"
                )
    for split in REPORTED_SPLITS:
        out[split]["ppo_vs_sft"] = ppo_vs_sft(out[split], outcomes[split])
    return {"schema_version": 1, "status": "complete", "run": run_dir.name, **out, "notes": notes}


def by_family(rows: list[dict[str, Any]], family_of: dict[str, str]) -> dict[str, Any]:
    """{family: {resolved_count, n}} over the rows of t1 families' tasks, by family name: a
    rate that holds while one family collapses (count-lines 14 -> 0 of 16 under a reward hack,
    LOG.md 2026-12-03) shows here, not in the split's total."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        fam = family_of.get(r["task"])
        if fam is not None:
            c = out.setdefault(fam, {"resolved_count": 0, "n": 0})
            c["resolved_count"] += int(bool(r["resolved"]))
            c["n"] += 1
    return dict(sorted(out.items()))


def ppo_vs_sft(
    split: dict[str, Any], outcomes: dict[str, list[tuple[str, bool]]] | None = None
) -> dict[str, Any] | None:
    """PPO's resolved rate minus SFT's on one split, in points, with the pooled two-proportion
    z-test (two-sided p; t1.eval.stats); None unless both stages were evaluated there.

    `paired`: both stages evaluate the same tasks, so the exact McNemar test on the tasks each
    resolved alone is the sharper test of the same difference (the two-proportion test treats
    the two samples as independent): {tasks, sft_only, ppo_only, p, test}, from `outcomes`
    (stage -> [(task, resolved)] of the split); null, with the reason in `paired_note`, unless
    every task has exactly one trajectory in each stage and the two stages share every task."""
    sft, ppo = split.get("sft"), split.get("ppo")
    if not sft or not ppo:
        return None
    test = two_proportion_test(sft["resolved_count"], sft["n"], ppo["resolved_count"], ppo["n"])
    out = {
        "points": round(100 * (ppo["resolved"] - sft["resolved"]), 2),
        "z": test["z"],
        "p": test["p"],
        "test": "pooled two-proportion z-test, two-sided",
    }
    out["paired"], note = _paired(outcomes or {})
    if note:
        out["paired_note"] = note
    return out


def _paired(outcomes: dict[str, list[tuple[str, bool]]]) -> tuple[dict[str, Any] | None, str]:
    """The exact McNemar test of SFT vs PPO by task, or None and why not."""
    a, b = outcomes.get("sft"), outcomes.get("ppo")
    if not a or not b:
        return None, "no per-task outcomes of both stages"
    sft, ppo = dict(a), dict(b)
    if len(sft) != len(a) or len(ppo) != len(b):
        return None, "a task has more than one trajectory in a stage (k > 1): not paired"
    if set(sft) != set(ppo):
        return None, f"the stages evaluated different tasks ({len(set(sft) ^ set(ppo))} differ)"
    sft_only = sum(sft[t] and not ppo[t] for t in sft)
    ppo_only = sum(ppo[t] and not sft[t] for t in sft)
    return {
        "tasks": len(sft),
        "sft_only": sft_only,
        "ppo_only": ppo_only,
        "p": mcnemar_exact(sft_only, ppo_only)["p"],
        "test": "exact McNemar test by task (paired), two-sided",
    }, ""


def _family_split(path: Path, notes: list[str]) -> tuple[set[str], dict[str, str]]:
    """t1 families' split (families.json): the `heldout_unseen` task ids, and task id -> family
    for every task (an id is `<family>-NNN`); empty, with a note, without it."""
    if not path.is_file():
        notes.append(f"{UNSEEN}: no family split ({path} missing)")
        return set(), {}
    doc = json.loads(path.read_text())
    ids = doc.get(UNSEEN)
    if ids is None:
        notes.append(f"{UNSEEN}: {path} has no {UNSEEN} split")
    families = set(doc.get("families", []))
    family_of = {
        tid: tid.rsplit("-", 1)[0]
        for split in ("train", "heldout", UNSEEN)
        for tid in map(str, doc.get(split) or [])
        if tid.rsplit("-", 1)[0] in families
    }
    return set(map(str, ids or [])), family_of
