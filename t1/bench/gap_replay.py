"""Settings (b) and (c) of `t1 bench gap` on TITO streams, and the guards: the R3 replay check
(the experts actually used vs the engine's routing capture, with replay on and off) and the
TITO drift check (the loss ids vs the engine's own output ids, with the sampled ids as recorded
and re-tokenized).

    from t1.bench.gap_replay import replay_check
    figures = replay_check(policy, assemble(traj.turns, tokenizer).segments)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from t1.agent import chat
from t1.agent.trajectory import Trajectory
from t1.bench.gap_forward import _gap, _Pool, forward_logp
from t1.model import routing as rt
from t1.tito import Segment, assemble


def replay_check(
    policy: torch.nn.Module, segments: Sequence[Segment], replay: bool = True
) -> dict[str, Any]:
    """Settings (b) and (c) on TITO segments, and the R3 replay check (issue 3 acceptance).

    For each segment with a routing record: one forward with replay (`replay=False` breaks
    the guard on purpose: the "replayed" forward then routes live) and one without. Counts,
    over the non-placeholder positions (`positions`): `live_differs`, where the gates' own
    live top-k in the replayed forward (before replay) differs from the record - the
    mismatch R3 removes; `replay_mismatch`, where the experts actually called in that forward
    differ from the record - 0 while replay works, `live_differs` with it off. Also the gaps
    with / without replay (mean over the loss region, and the max |delta logp|).
    """
    out = {"segments": 0, "positions": 0, "loss_tokens": 0, "replay_mismatch": 0}
    out["live_differs"] = 0
    with_r3, without = _Pool(), _Pool()
    for seg in segments:
        if seg.routing is None:
            continue
        lp_r, live, used = forward_logp(policy, seg.ids, seg.routing if replay else None)
        lp_l = forward_logp(policy, seg.ids)[0] if replay else lp_r
        n_live, n = rt.mismatch(live, seg.routing)
        out["segments"] += 1
        out["positions"] += n
        out["replay_mismatch"] += rt.mismatch(used, seg.routing)[0]
        out["live_differs"] += n_live
        mask = seg.loss_mask
        for pool, lp in ((with_r3, lp_r), (without, lp_l)):
            g, n = _gap(lp, seg.logprobs, mask)
            pool.add(g, n, float(np.abs(lp - seg.logprobs)[mask].max()) if n else 0.0)
        out["loss_tokens"] += int(mask.sum())
    out["live_differs_rate"] = out["live_differs"] / out["positions"] if out["positions"] else 0.0
    out.update(
        gap_replay=with_r3.mean,
        gap_replay_max=with_r3.max,
        gap_live=without.mean,
        gap_live_max=without.max,
    )
    return out


def guard_checks(
    policy: torch.nn.Module,
    trajs: Sequence[Trajectory],
    segments: Sequence[Segment],
    tokenizer,
    on: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The replay and drift checks on the same rollouts with their guard on and off.

    replay: experts used vs the engine's capture with replay (on) and without (off);
    drift: the loss ids of each turn's stream against the engine's own output ids, for the
    sampled ids as recorded (on) and re-tokenized - decoded, then encoded again, as a
    text-level pipeline does (off) - and, for the re-tokenized stream, the old check that
    compared the loss ids with the ids the stream was built from (it sees nothing)."""
    from t1.agent.trajectory import Turn
    from t1.tito import Audit, audit_outputs

    on = on or replay_check(policy, segments)
    off = replay_check(policy, segments, replay=False)
    drift = {"loss_tokens": 0, "on": 0, "off": 0, "off_old_check": 0, "turns_retokenized": 0}
    for traj in trajs:
        for t in traj.turns:
            engine = t.sampled_ids if t.engine_ids is None else t.engine_ids
            text = tokenizer.decode(t.sampled_ids.tolist(), skip_special_tokens=False)
            again = chat.encode(tokenizer, text)
            drift["turns_retokenized"] += again != t.sampled_ids.tolist()
            for key, ids in (("on", t.sampled_ids), ("off", again)):
                blind = Turn(t.prompt_ids, ids, np.zeros(len(ids), np.float32))
                segs = assemble([blind], tokenizer).segments
                audit = Audit()
                audit_outputs(segs, [dataclasses.replace(blind, engine_ids=engine)], audit)
                drift[key] += audit.drift_tokens
                if key == "off":
                    drift["off_old_check"] += assemble([blind], tokenizer).audit.drift_tokens
                else:
                    drift["loss_tokens"] += audit.loss_tokens
    return {
        "replay_mismatch_on": on["replay_mismatch"],
        "replay_mismatch_off": off["replay_mismatch"],
        "live_mismatch_on": on["live_differs"],
        "live_mismatch_off": off["live_differs"],
        "routed_positions": on["positions"],
        "gap_max_on": on["gap_replay_max"],
        "gap_max_off": off["gap_replay_max"],
        "drift": drift,
    }
