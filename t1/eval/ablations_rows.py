"""A row of the `t1 ablations` table: the paper's figure and the shape each ablation must show,
the verdicts (yes / no / not measurable), how figures are written in a cell, and the check that
every cell holds text.

    from t1.eval.ablations_rows import YES, _row, check_filled
    row = _row("gap", "(a) train-inference gap", measured, YES, why, [path], data)
    check_filled([row])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

YES, NO, NOT_MEASURABLE = "yes", "no", "not measurable"
ALPHA = 0.05  # the two-proportion tests of (d) and (e)


PAPER = {
    "gap": "0.021 without TITO + R3, 0.013 with both",
    "drift": "0.0000% over 1,402 samples",
    "critic": "cold EV opens at -33.6, negative 30 of 58 steps; warmed never negative, "
    "plateau 0.71-0.86",
    "reward": "binary reward never beat the supervised baseline",
    "heldout": "PPO above SFT on held-out tasks",
}
SHAPE = {
    "gap": "TITO + R3 (c) below text (a)",
    "drift": "drift exactly 0",
    "critic": "every seed: warm EV never negative, cold EV opens negative",
    "reward": "dense PPO above binary PPO (p < 0.05); binary PPO not above the SFT baseline "
    "(below it, or p >= 0.05)",
    "heldout": "PPO above SFT, two-proportion test p < 0.05",
}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float] | None) -> str:
    return "n/a" if not ci else f"[{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]"


def _p(test: dict[str, Any]) -> str:
    return "undefined" if test["p"] is None else f"{test['p']:.3g}"


def significant(test: dict[str, Any]) -> bool:
    """A two-proportion test's p below ALPHA (an undefined p is not significant)."""
    return test["p"] is not None and test["p"] < ALPHA


def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _row(key, item, measured, holds, why, sources, data) -> dict[str, Any]:
    return {
        "key": key,
        "item": item,
        "measured": measured,
        "paper": PAPER[key],
        "shape": SHAPE[key],
        "holds": holds,
        "why": why,
        "sources": [str(s) for s in sources],
        "data": data,
    }


def check_filled(rows: Sequence[dict[str, Any]]) -> None:
    """Every cell of every row holds text; raises AssertionError naming the empty one."""
    for r in rows:
        for col in ("item", "measured", "paper", "shape", "holds", "why"):
            if not str(r.get(col) or "").strip():
                raise AssertionError(f"row {r.get('key')}: empty {col}")
        if r["holds"] not in (YES, NO, NOT_MEASURABLE):
            raise AssertionError(f"row {r['key']}: holds {r['holds']!r}")
