"""Ablation (e) of `t1 ablations`: SFT vs PPO on held-out tasks, from RUN/summary.json (t1 report):
PPO above SFT by the pooled two-proportion z-test at p < 0.05, the statistic issue 23 sets for
the campaign's held-out lift (the Wilson intervals and the paired McNemar test beside it);
cross-checked with the run's pool manifests (a held-out split whose every task is in the train
pool is not held out).

Until 2026-12-07 the verdict asked for non-overlapping 95% intervals. Two intervals overlap for
differences that a test of the difference finds at p < 0.01 (each interval's half-width is
about 1.4 times the difference's standard error at these rates), so that verdict said no to
lifts the test it reported beside found.

    from t1.eval.ablations_heldout import heldout_row
    row = heldout_row("results/tiny/summary.json")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from t1.eval.ablations_inputs import AblationError, _need, read_json
from t1.eval.ablations_rows import ALPHA, NO, NOT_MEASURABLE, YES, _ci, _p, _pct, _row, significant
from t1.eval.stats import intervals_overlap, two_proportion_test


def pool_ids(run_dir: Path, split: str) -> set[str] | None:
    """Task ids of RUN/pool/<split>/manifest.json (t1 pool), None when there is none."""
    path = Path(run_dir) / "pool" / split / "manifest.json"
    if not path.is_file():
        return None
    return {str(t["id"]) for t in read_json(path, f"t1 pool {split} manifest")["tasks"]}


def heldout_row(path: str | Path) -> dict[str, Any]:
    """From summary.json; cross-checked with the run's pool manifests where they exist: a
    held-out figure while every eval-pool task is in the train pool is not held out."""
    doc = read_json(path, "t1 report summary.json")
    held = _need(doc, path, "heldout")
    sft, ppo = held.get("sft"), held.get("ppo")
    data: dict[str, Any] = {"sft": sft, "ppo": ppo}
    run_dir = Path(path).parent
    train, evaluated = pool_ids(run_dir, "train"), pool_ids(run_dir, "eval")
    if (sft or ppo) and train is not None and evaluated is not None and evaluated <= train:
        data["pools"] = {"train": sorted(train), "eval": sorted(evaluated)}
        measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)} (as {Path(path).name} splits them)"
        why = (
            f"{path} reports a held-out split, but every task of {run_dir}/pool/eval/manifest.json "
            f"is in {run_dir}/pool/train/manifest.json: the split is not held out (are the "
            "eval records' task ids the manifest's ids?)"
        )
        return _row("heldout", "(e) SFT vs PPO, held-out", measured, NOT_MEASURABLE, why,
                    [path], data)  # fmt: skip
    if sft is None or ppo is None:
        notes = [n for n in doc.get("notes", []) if n.startswith("heldout.")]
        data["notes"] = notes
        measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)}"
        why = f"{path}: no held-out figure: " + ("; ".join(notes) or "heldout is null")
        return _row("heldout", "(e) SFT vs PPO, held-out", measured, NOT_MEASURABLE, why,
                    [path], data)  # fmt: skip
    for name, fig in (("sft", sft), ("ppo", ppo)):
        for key in ("resolved", "n", "ci95"):
            if fig.get(key) is None:
                raise AblationError(f"{path}: heldout.{name}.{key} is missing")
    xs = round(sft["resolved"] * sft["n"])
    xp = round(ppo["resolved"] * ppo["n"])
    test = two_proportion_test(xs, sft["n"], xp, ppo["n"])
    overlap = intervals_overlap(sft["ci95"], ppo["ci95"])
    data.update(test=test, intervals_overlap=overlap)
    measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)}; two-proportion p {_p(test)}"
    paired = (held.get("ppo_vs_sft") or {}).get("paired")
    if paired:  # beside the verdict (summary.json's paired test)
        data["paired"] = paired
        measured += (
            f"; paired by task: {paired['ppo_only']} resolved by PPO only, {paired['sft_only']}"
            f" by SFT only, exact McNemar p {paired['p']:.3g}"
        )
    intervals = "do not overlap" if not overlap else "overlap"
    if ppo["resolved"] <= sft["resolved"]:
        holds, why = NO, f"PPO not above SFT (the 95% intervals {intervals})"
    elif not significant(test):
        holds, why = NO, f"PPO above SFT, but two-proportion p {_p(test)} >= {ALPHA}"
    else:
        holds = YES
        why = (
            f"PPO above SFT, two-proportion p {_p(test)} < {ALPHA} (the 95% intervals {intervals})"
        )
    return _row("heldout", "(e) SFT vs PPO, held-out", measured, holds, why, [path], data)


def _fig(f: dict[str, Any] | None) -> str:
    if f is None:
        return "none"
    return f"{_pct(f['resolved'])} {_ci(f['ci95'])} (n {f['n']})"
