"""Ablations (a) and (b) of `t1 ablations`, the two TITO rows: (a) the train-inference gap of
`t1 bench gap` (text re-tokenized vs TITO vs TITO + R3), and (b) the TITO drift that
`t1 tito-audit --full-json` counted over the policy-sampled trajectories of the runs.

    from t1.eval.ablations_tito import drift_row, gap_row
    rows = [gap_row("results/tiny/ablations/gap.json"), drift_row("results/tiny/ablations/drift.json")]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from t1.eval.ablations_inputs import _need, _num, read_json
from t1.eval.ablations_rows import NO, NOT_MEASURABLE, YES, _f, _pct, _row

ASKED_TRAJECTORIES = 1000  # issue 14: the drift audit over at least this many


def gap_row(path: str | Path) -> dict[str, Any]:
    doc = read_json(path, "t1 bench gap --json")
    a = _num(_need(doc, path, "a_text_retokenized", "gap"))
    b = _num(_need(doc, path, "b_tito", "gap"))
    c = _num(_need(doc, path, "c_tito_r3", "gap"))
    n = int(_need(doc, path, "trajectories"))
    drift = _num(doc["a_text_retokenized"].get("token_drift_rate"))
    data = {"text": a, "tito": b, "tito_r3": c, "trajectories": n, "token_drift_rate": drift}
    data["replay_mismatch"] = doc["c_tito_r3"].get("replay_mismatch")
    measured = (
        f"(a) text {_f(a)}, (b) TITO {_f(b)}, (c) TITO + R3 {_f(c)} over {n} trajectories "
        f"(text token drift {_pct(drift)})"
    )
    if a is None or c is None:
        holds, why = NOT_MEASURABLE, f"{path}: gap undefined ({n} trajectories with loss tokens)"
    elif c < a:
        holds, why = YES, f"(c) {_f(c)} < (a) {_f(a)}"
    else:
        holds, why = NO, f"(c) {_f(c)} >= (a) {_f(a)}"
    return _row("gap", "(a) train-inference gap", measured, holds, why, [path], data)


def drift_row(path: str | Path) -> dict[str, Any]:
    """Counted over the trajectories the policy's engine sampled (PPO and warm-up rollouts,
    evaluations); expert trajectories (a scripted engine replaying reference solutions) are
    listed beside, not counted."""
    doc = read_json(path, "t1 tito-audit --full-json")
    errors = _need(doc, path, "errors")
    aborted = _need(doc, path, "tito_aborted")
    self_checked = int(_need(doc, path, "self_checked"))
    kinds: dict[str, int] = {}
    n = loss = drifted = 0
    for d, c in _need(doc, path, "by_dir").items():
        kind = _kind(d)
        kinds[kind] = kinds.get(kind, 0) + int(c["engine_checked"])
        if kind != "expert":
            n += int(c["engine_checked"])
            loss += int(c["engine_loss_tokens"])
            drifted += int(c["engine_drift_tokens"])
    rate = drifted / loss if loss else None
    data = {
        "trajectories": n,
        "loss_tokens": loss,
        "drift_tokens": drifted,
        "drift_rate": rate,
        "errors": len(errors),
        "tito_aborted": len(aborted),
        "self_checked": self_checked,
        "by_kind": kinds,
        "asked": ASKED_TRAJECTORIES,
    }
    where = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()) if v and k != "expert")
    measured = (
        f"{drifted} drifted of {loss} loss tokens ({_pct4(rate)}) over {n} policy-sampled "
        f"trajectories checked against the engine's ids ({where or 'none'}); assembly errors "
        f"{len(errors)}, aborted by TITO {len(aborted)}; not counted: {kinds.get('expert', 0)} "
        f"expert, {self_checked} without engine ids"
    )
    if n == 0 or loss == 0:
        holds = NOT_MEASURABLE
        why = f"{path}: no policy-sampled trajectory carries the engine's output ids"
    elif drifted or errors or aborted:
        holds, why = NO, f"{drifted} drifted tokens, {len(errors)} errors, {len(aborted)} aborts"
    else:
        holds, why = YES, "0 drifted tokens, 0 errors, 0 aborts"
    if n < ASKED_TRAJECTORIES:
        why += f"; {n} trajectories, fewer than the {ASKED_TRAJECTORIES:,} the issue asks"
    return _row("drift", "(b) TITO drift", measured, holds, why, [path], data)


def _pct4(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.4f}%"


def _kind(rollout_dir: str) -> str:
    p = Path(rollout_dir).as_posix()
    if "/ppo/steps/" in p:
        return "PPO rollouts"
    if "/eval/" in p:
        return "evaluations"
    if "/critic/rollout" in p:
        return "critic warm-up rollouts"
    if "/sft/expert" in p:
        return "expert"
    if "/ablations/drift_rollout" in p:
        return "drift rollout"  # ablations.smk: the SFT policy over the train pool, for (b)
    return "other"
