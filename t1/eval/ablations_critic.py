"""Ablation (c) of `t1 ablations`: critic warm-up vs cold start. Both critics trained on the same
batches, one `t1 bench critic --json` per seed (every seed: the warm EV never negative, the cold
one opening negative), and optionally the two campaigns' own on-policy EV curves beside.

    from t1.eval.ablations_critic import campaign_curves, critic_row
    row = critic_row(seed_files, campaign_curves(Path("results/tiny"), Path("results/tiny-cold")))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from t1.eval.ablations_inputs import AblationError, _need, _num, read_json, step_events
from t1.eval.ablations_rows import NO, NOT_MEASURABLE, YES, _f, _row


def critic_row(
    paths: Sequence[str | Path], campaign: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`paths`: one `t1 bench critic --json` per seed; `campaign`: the two campaigns' own
    curves ({"warm": curve record, "cold": ...}, t1.bench.critic.from_metrics), or None."""
    if not paths:
        raise AblationError("no critic.json given (t1 bench critic --json, one per seed)")
    seeds = []
    for path in paths:
        doc = read_json(path, "t1 bench critic --json")
        arms = {}
        for arm in ("warm", "cold"):
            ev = _need(doc, path, "arms", arm, "explained_variance")
            if not ev:
                raise AblationError(f"{path}: arms.{arm}.explained_variance is empty")
            summary = _need(doc, path, "arms", arm, "summary")
            arms[arm] = {"explained_variance": [_num(v) for v in ev], "summary": summary}
        seeds.append({"path": str(path), "config": doc.get("config"), **arms})
    steps = len(seeds[0]["warm"]["explained_variance"])
    warm = [s["warm"]["summary"] for s in seeds]
    cold = [s["cold"]["summary"] for s in seeds]
    undefined = [s["path"] for s in seeds if not all(
        s[a]["summary"]["defined_steps"] for a in ("warm", "cold"))]  # fmt: skip
    data: dict[str, Any] = {"seeds": seeds, "steps": steps}
    cold_open = [_num(c["opens_at"]) for c in cold]
    warm_neg = [int(w["negative_steps"]) for w in warm]
    cold_neg = [int(c["negative_steps"]) for c in cold]
    warm_last = [_num(w["last"]) for w in warm]
    data.update(
        cold_opens_at=_spread(cold_open),
        cold_negative_steps=_spread(cold_neg),
        warm_negative_steps=_spread(warm_neg),
        warm_last=_spread(warm_last),
        defined_steps={a: [int(s[a]["summary"]["defined_steps"]) for s in seeds] for a in ("warm", "cold")},
    )  # fmt: skip
    measured = (
        f"same {steps} batches, {len(seeds)} seeds (mean [min, max]): cold opens at "
        f"{_sp(data['cold_opens_at'])}, negative {_sp(data['cold_negative_steps'], 1)} of "
        f"{steps} steps; warm negative {_sp(data['warm_negative_steps'], 1)} of {steps}, "
        f"last EV {_sp(data['warm_last'])}"
    )
    if campaign:
        data["campaign"] = campaign
        cw, cc = campaign["warm"]["summary"], campaign["cold"]["summary"]
        measured += (
            f". Campaigns (own batches): cold opens at {_f(_num(cc['opens_at']), 3)}, negative "
            f"{cc['negative_steps']} of {cc['steps']}; warm negative {cw['negative_steps']} of "
            f"{cw['steps']}"
        )
    if undefined:
        holds = NOT_MEASURABLE
        why = "EV undefined at every step of an arm (every batch's rewards equal) in " + ", ".join(
            undefined
        )
    elif all(n == 0 for n in warm_neg) and all(o is not None and o < 0 for o in cold_open):
        holds, why = YES, "in every seed the warm EV is never negative and the cold EV opens < 0"
    else:
        bad = [
            f"seed file {s['path']}: warm negative {w}, cold opens {_f(o, 3)}"
            for s, w, o in zip(seeds, warm_neg, cold_open, strict=True)
            if w > 0 or o is None or o >= 0
        ]
        holds, why = NO, "; ".join(bad)
    sources = [str(p) for p in paths] + (campaign.get("sources", []) if campaign else [])
    return _row("critic", "(c) critic warm-up vs cold start", measured, holds, why, sources, data)


def _spread(xs: Sequence[float | None]) -> dict[str, Any]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return {"values": list(xs), "mean": None, "min": None, "max": None}
    return {"values": list(xs), "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}


def _sp(s: dict[str, Any], digits: int = 3) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def campaign_curves(warm_run: Path, cold_run: Path) -> dict[str, Any]:
    """The EV curves of two finished campaigns, each from its own ppo_step events."""
    from t1.bench.critic import _curve_record, ev_curve

    out: dict[str, Any] = {"sources": []}
    for arm, run in (("warm", warm_run), ("cold", cold_run)):
        events = [e for _, evs in step_events(run) for e in evs]
        out[arm] = _curve_record(ev_curve(events))
        out["sources"].append(str(run / "ppo" / "steps"))
    return out
