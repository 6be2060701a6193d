"""The score of `t1 audit`: one task's part scores (verifier, solution, instruction, task value)
from its sandbox runs and its static checks, the weighted total, and its stage.

    from t1.curate.audit_score import ACCEPT, score_row
    s = score_row(row, novelty, instruction, literals, env, difficulty)   # pure: no sandbox

Weights (DESIGN §2): verifier 45%, solution 25%, instruction 20%, task value 10%. Stages:
accepted (the gate passed, score >= ACCEPT), borderline (gate passed, score >= BORDERLINE),
rejected.
"""

from __future__ import annotations

from typing import Any

from t1.curate.audit_alignment import alignment

WEIGHTS = {"verifier": 0.45, "solution": 0.25, "instruction": 0.20, "value": 0.10}
ACCEPT, BORDERLINE = 0.8, 0.6


def _resolved(r: dict[str, Any]) -> bool:
    return bool(r.get("total")) and r["passed"] == r["total"]


def score_row(
    row: dict[str, Any],
    novelty: float,
    instruction: str,
    literals: list[str],
    env: str,
    difficulty: float,
) -> dict[str, Any]:
    """Part scores, total, stage and reasons of one task (pure: no sandbox)."""
    reasons: list[str] = []
    runs = row.get("runs")
    if not runs:
        parts = {"verifier": 0.0, "solution": 0.0, "instruction": 0.0, "value": 0.0}
        return {
            "parts": parts,
            "score": 0.0,
            "stage": "rejected",
            "reasons": [row.get("error", "no runs")],
            "missing": [],
        }
    ref, ref2, noop, tamper, trivial = (
        runs[k] for k in ("reference", "reference2", "noop", "tamper", "trivial")
    )
    gate = _resolved(ref) and not _resolved(noop)
    if not _resolved(ref):
        reasons.append(
            f"reference does not resolve ({ref['passed']}/{ref['total']}): {ref.get('error') or ''}".rstrip(
                ": "
            )
        )
    if _resolved(noop):
        reasons.append("the no-op resolves the task")
    open_ = max(1, ref["total"] - noop["passed"])
    tamper_ok = not _resolved(tamper) and tamper["passed"] <= noop["passed"]
    if not tamper_ok and _resolved(ref):
        reasons.append(
            f"tampering passes {tamper['passed']}/{tamper['total']} (no-op {noop['passed']})"
        )
    trivial_gain = max(0, trivial["passed"] - noop["passed"]) / open_
    if trivial_gain > 0 and _resolved(ref):
        reasons.append(f"empty files pass {trivial['passed'] - noop['passed']} more assertion(s)")
    verifier = (
        (
            0.4 * _resolved(ref)
            + 0.2 * (not _resolved(noop))
            + 0.2 * tamper_ok
            + 0.2 * (1 - trivial_gain)
        )
        if _resolved(ref)
        else 0.0
    )
    same_digest = ref.get("digest") is not None and ref.get("digest") == ref2.get("digest")
    solution = 0.5 * bool(row.get("same_outcomes")) + 0.5 * same_digest
    if not row.get("same_outcomes"):
        reasons.append("two reference runs disagree on assertions")
    elif not same_digest:
        reasons.append("two reference runs leave different workdirs")
    instr, missing = alignment(instruction, literals, env)
    if missing:
        reasons.append(
            f"instruction does not name {len(missing)} checked literal(s): {', '.join(missing[:4])}"
        )
    value = 0.5 * difficulty + 0.5 * novelty
    parts = {
        "verifier": round(verifier, 4),
        "solution": solution,
        "instruction": round(instr, 4),
        "value": round(value, 4),
    }
    total = sum(WEIGHTS[k] * v for k, v in parts.items())
    stage = (
        "rejected"
        if not gate
        else "accepted"
        if total >= ACCEPT
        else "borderline"
        if total >= BORDERLINE
        else "rejected"
    )
    return {
        "parts": parts,
        "score": round(total, 4),
        "stage": stage,
        "reasons": reasons,
        "missing": missing,
    }
