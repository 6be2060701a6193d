"""Ablation (d) of `t1 ablations`: dense vs binary reward. Per PPO step the resolved rate of the
training rollouts of both runs, and their final evaluations against the supervised baseline,
each comparison a pooled two-proportion z-test: dense PPO above binary PPO at p < 0.05, and
binary PPO not above the baseline at p < 0.05 (the paper: binary reward never beat it).

Until 2026-12-07 the verdict compared point estimates: a binary run 3 tasks of 422 above the
baseline (p 0.84) read as "binary beat SFT", a difference the test beside it could not tell from
noise.

    from t1.eval.ablations_reward import reward_row
    row = reward_row(Path("results/tiny"), Path("results/tiny-binary"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from t1.eval.ablations_inputs import AblationError, _need, _num, read_json, step_events
from t1.eval.ablations_rows import ALPHA, NO, NOT_MEASURABLE, YES, _ci, _p, _pct, _row, significant
from t1.eval.stats import two_proportion_test


def resolved_curve(run: Path) -> list[dict[str, Any]]:
    """Per PPO step: {"step", "resolved_rate" (None if the step logged none), "reward_mean"}."""
    out = []
    for step, events in step_events(run):
        ev = events[-1]
        out.append(
            {
                "step": step,
                "resolved_rate": _num(ev.get("resolved_rate")),
                "reward_mean": _num(ev.get("reward_mean")),
                "rows": ev.get("rows"),
            }
        )
    return out


def final_eval(path: Path) -> dict[str, Any]:
    """Overall {resolved, trajectories, resolved_rate, ci95} of an eval.json (t1 evaluate)."""
    doc = read_json(path, "t1 evaluate eval.json")
    o = _need(doc, path, "summary", "overall")
    n = int(_need(o, path, "trajectories"))
    if n == 0:
        raise AblationError(f"{path}: summary.overall.trajectories is 0 (no evaluation run)")
    return {
        "resolved": int(o["resolved"]),
        "trajectories": n,
        "resolved_rate": _num(o["resolved_rate"]),
        "ci95": o.get("ci95"),
        "source": str(path),
    }


def reward_row(dense: Path, binary: Path) -> dict[str, Any]:
    dense, binary = Path(dense), Path(binary)
    curves = {"dense": resolved_curve(dense), "binary": resolved_curve(binary)}
    ppo = {
        "dense": final_eval(dense / "eval" / "ppo" / "eval.json"),
        "binary": final_eval(binary / "eval" / "ppo" / "eval.json"),
    }
    own = binary / "eval" / "sft" / "eval.json"
    sft = final_eval(own if own.is_file() else dense / "eval" / "sft" / "eval.json")
    d, b, s = ppo["dense"], ppo["binary"], sft
    tests = {
        "binary_vs_sft": two_proportion_test(s["resolved"], s["trajectories"], b["resolved"],
                                             b["trajectories"]),
        "dense_vs_binary": two_proportion_test(b["resolved"], b["trajectories"], d["resolved"],
                                               d["trajectories"]),
    }  # fmt: skip
    data = {"curves": curves, "final": {**ppo, "sft": sft}, "tests": tests}
    last = {k: next((p["resolved_rate"] for p in reversed(v) if p["resolved_rate"] is not None),
                    None) for k, v in curves.items()}  # fmt: skip
    measured = (
        f"final eval, resolved: dense PPO {_ev(d)}, binary PPO {_ev(b)}, SFT baseline {_ev(s)}; "
        f"training rollouts over {len(curves['dense'])} / {len(curves['binary'])} steps, last "
        f"{_pct(last['dense'])} / {_pct(last['binary'])}; p(dense vs binary) "
        f"{_p(tests['dense_vs_binary'])}, p(binary vs SFT) {_p(tests['binary_vs_sft'])}"
    )
    rates = {d["resolved_rate"], b["resolved_rate"], s["resolved_rate"]}
    if len(rates) == 1:
        holds = NOT_MEASURABLE
        why = f"dense PPO, binary PPO and SFT all resolve {_pct(d['resolved_rate'])}: nothing to order"
    else:
        binary_above = b["resolved_rate"] > s["resolved_rate"] and significant(
            tests["binary_vs_sft"]
        )
        dense_above = d["resolved_rate"] > b["resolved_rate"]
        bad = [
            w
            for w, fails in (
                (f"binary PPO above the SFT baseline (p {_p(tests['binary_vs_sft'])} < {ALPHA})",
                 binary_above),
                ("dense PPO not above binary PPO", not dense_above),
                (f"dense PPO above binary PPO, but p {_p(tests['dense_vs_binary'])} >= {ALPHA}",
                 dense_above and not significant(tests["dense_vs_binary"])),
            )
            if fails
        ]  # fmt: skip
        if bad:
            holds, why = NO, "; ".join(bad)
        else:
            side = "above" if b["resolved_rate"] > s["resolved_rate"] else "not above"
            holds = YES
            why = (
                f"dense PPO above binary PPO (p {_p(tests['dense_vs_binary'])} < {ALPHA}); binary "
                f"PPO {side} the SFT baseline (p {_p(tests['binary_vs_sft'])})"
            )
    sources = [str(dense / "ppo" / "steps"), str(binary / "ppo" / "steps"), d["source"],
               b["source"], s["source"]]  # fmt: skip
    return _row("reward", "(d) dense vs binary reward", measured, holds, why, sources, data)


def _ev(e: dict[str, Any]) -> str:
    return f"{_pct(e['resolved_rate'])} {_ci(e['ci95'])} ({e['resolved']}/{e['trajectories']})"
