"""`t1 bench gap`: the train-inference gap on real rollouts, in three settings side by side.

    t1 bench gap [--config FILE] [--trajectories 20] [--sft-steps 30] [--json FILE]
                 [--save-policy DIR] [--save-rollout DIR]
    t1 bench gap --rollout DIR --policy DIR [--tokenizer DIR] [--json FILE]

The gap is the mask-weighted mean |logp_train - logp_rollout| over the loss region
(`t1.ppo.metrics.train_inference_gap`; paper: 0.021 without TITO + R3, 0.013 with both). The
rollout side is the bf16 local engine (its per-token logprobs at temperature 1); the trainer
side is an fp32 copy of the same weights, one full-sequence forward per stream. Settings:

(a) text, no TITO, no R3. Each trajectory is turned into OpenAI-style messages (system and
    user from its first prompt, each assistant turn's sampled text verbatim as `content`,
    each observation as a `tool` message), re-rendered with the chat template and re-encoded
    (`t1.agent.chat.render_ids`), and the trainer scores that token sequence with live routing (a
    routing record cannot be aligned to ids the engine never saw). Alignment: a sampled token
    is compared with a re-encoded token when both START AT THE SAME BYTE of the rendered
    conversation and have the same id (byte offsets: cumulative byte lengths of the tokens;
    each assistant content starts where the render of the messages before it, with the
    generation prompt, ends). Sampled tokens without such a partner (merged or split
    differently on re-encoding, or shifted by a U+FFFD that replaced an invalid UTF-8
    byte) are "token drift", reported as a rate over all sampled tokens; the gap of (a) is
    taken over the matched ones only, so it measures what drift does to the context of the
    tokens that survived. The context drifts too: encoding the whole text merges across the
    glue our loop appended as ids (an observation ending in `]` + the glue's newline become
    one token `]\n`), counted as `streams_differing_from_tito`.
(b) TITO without R3: the assembled streams (t1.tito), live routing in the trainer.
(c) TITO with R3: the same streams, the rollout's routing replayed (t1.model.routing.replay).

Also reported for (b)/(c), from the forward under replay: the share of positions whose live
fp32 routing - the gate's own top-k, recorded before the replay overrides it - differs from
the engine's capture at any layer (the mismatch R3 removes), and the positions where the
experts the MoE layers were actually called with differ from the capture (0 while replay
works; `replay_check(..., replay=False)` shows it equal to the live mismatch).

Policy. Without --policy, the config's tiny MoE is initialised and warm-started with
`--sft-steps` steps of SFT on expert trajectories of the example tasks (reference solutions
executed as tool calls, `t1 rollout --expert`), because a random init's nearly uniform
logits make every gap tiny. `--sft-steps 0` measures the random init (said in the output).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from t1.agent import chat
from t1.agent.trajectory import Status, Trajectory
from t1.model import routing as rt
from t1.ppo.metrics import train_inference_gap
from t1.records import write_json_atomic
from t1.tito import Segment, TitoError, assemble
from t1.verify.reward import RewardSpec

TRAINED = (Status.COMPLETED, Status.TRUNCATED)
BENCH_REWARD = RewardSpec("dense", 10.0)  # the rewards play no part in the gap


# ------------------------------------------------------------------ trainer-side forwards


def forward_logp(
    policy: torch.nn.Module, ids: Sequence[int], routing: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One full-sequence forward: (logp [T] of each id given the ids before it, 0 at t = 0;
    the gates' live top-k before any replay [T, L, k]; the expert ids the experts modules
    were called with [T, L, k]). `routing` int [T, L, k] (-1 = live) replays."""
    from t1.train.hf import token_logp

    x = torch.tensor([list(ids)], dtype=torch.long)
    with (
        torch.no_grad(),
        rt.RoutingCapture(policy, stage="live") as live,
        rt.RoutingCapture(policy, stage="used") as used,
    ):
        if routing is None:
            logits = policy(input_ids=x, use_cache=False).logits
        else:
            r = torch.as_tensor(np.asarray(routing), dtype=torch.int16)[None]
            with rt.replay(policy, r):
                logits = policy(input_ids=x, use_cache=False).logits
    return token_logp(logits, x)[0].numpy(), live.collect().numpy(), used.collect().numpy()


def _gap(logp_train: np.ndarray, logp_rollout: np.ndarray, mask: np.ndarray) -> tuple[float, int]:
    """(train_inference_gap, loss tokens) of one stream; arrays [T]."""
    n = int(np.asarray(mask, bool).sum())
    if n == 0:
        return math.nan, 0
    g = train_inference_gap(
        torch.as_tensor(logp_train)[None],
        torch.as_tensor(logp_rollout, dtype=torch.float64)[None],
        torch.as_tensor(np.asarray(mask, bool))[None],
    )
    return g, n


class _Pool:
    """Token-weighted pooling of per-stream gaps (= one mask-weighted mean over all streams)."""

    def __init__(self) -> None:
        self.sum, self.n, self.max = 0.0, 0, 0.0

    def add(self, gap: float, n: int, mx: float = 0.0) -> None:
        if n:
            self.sum += gap * n
            self.n += n
            self.max = max(self.max, mx)

    @property
    def mean(self) -> float:
        return self.sum / self.n if self.n else math.nan


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


# ------------------------------------------------------------------ setting (a): text


def messages_of(traj: Trajectory, tokenizer) -> list[dict[str, Any]]:
    """The trajectory as an OpenAI-style message list (system, user, assistant, tool, ...).

    System and user contents are read back from the first prompt, which the chat template
    rendered from exactly those two messages; raises ValueError when re-rendering them does
    not give the first prompt's ids back."""
    from t1.agent.tokenizer import IM_END, IM_START

    first = tokenizer.decode(
        traj.turns[0].prompt_ids.tolist(),
        skip_special_tokens=False,
        clean_up_tokenization_spaces=False,
    )
    sys_head, user_head = f"{IM_START}system\n", f"{IM_END}\n{IM_START}user\n"
    tools_at = first.find("\n\n# Tools\n")
    user_at = first.find(user_head)
    if not first.startswith(sys_head) or tools_at < 0 or user_at < 0:
        raise ValueError(f"{traj.task_id}: first prompt is not system + tools + user")
    tail = f"{IM_END}\n{IM_START}assistant\n"
    if not first.endswith(tail):
        raise ValueError(f"{traj.task_id}: first prompt does not end with the generation prompt")
    messages = chat.initial_messages(
        first[user_at + len(user_head) : -len(tail)], first[len(sys_head) : tools_at]
    )
    if chat.render_ids(tokenizer, messages) != traj.turns[0].prompt_ids.tolist():
        raise ValueError(f"{traj.task_id}: re-rendered first prompt differs from its ids")
    for turn in traj.turns:
        messages.append(
            {"role": "assistant", "content": chat.turn_text(tokenizer, turn.sampled_ids)}
        )
        if len(turn.appended_ids):
            messages.append({"role": "tool", "content": turn.observation})
    return messages


class _TokenBytes:
    """Byte string of each token id (byte-level BPE: the token's characters mapped back)."""

    def __init__(self, tokenizer) -> None:
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        self.tokenizer = tokenizer
        self.inv = {c: b for b, c in bytes_to_unicode().items()}
        self.cache: dict[int, int] = {}

    def length(self, token_id: int) -> int:
        n = self.cache.get(token_id)
        if n is None:
            s = self.tokenizer.convert_ids_to_tokens(int(token_id))
            n = self.cache[token_id] = sum(1 if c in self.inv else len(c.encode()) for c in s)
        return n

    def offsets(self, ids: Sequence[int], start: int = 0) -> np.ndarray:
        lens = np.fromiter((self.length(i) for i in ids), np.int64, len(ids))
        return start + np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(ids) else lens


def retokenized_gap(
    policy: torch.nn.Module, traj: Trajectory, tokenizer, nbytes: _TokenBytes | None = None
) -> dict[str, Any]:
    """Setting (a) for one trajectory: sum |delta logp| over matched tokens, matched, sampled."""
    nbytes = nbytes or _TokenBytes(tokenizer)
    messages = messages_of(traj, tokenizer)
    full = chat.render_text(tokenizer, messages, add_generation_prompt=False)
    ids = chat.encode(tokenizer, full)
    r_off = nbytes.offsets(ids)
    at = {int(o): j for j, o in enumerate(r_off)}
    lp_train, _, _ = forward_logp(policy, ids)
    train, rollout = [], []
    sampled = 0
    k = 0
    for m, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        turn = traj.turns[k]
        k += 1
        head = chat.render_text(tokenizer, messages[:m], add_generation_prompt=True)
        if not full.startswith(head):
            raise ValueError(f"{traj.task_id}: the template is not append-only at turn {k - 1}")
        offs = nbytes.offsets(turn.sampled_ids.tolist(), len(head.encode()))
        sampled += len(offs)
        for i, (o, tid) in enumerate(zip(offs.tolist(), turn.sampled_ids.tolist(), strict=True)):
            j = at.get(o)
            if j is not None and j > 0 and ids[j] == tid:
                train.append(lp_train[j])
                rollout.append(turn.logprobs[i])
    train_a, rollout_a = np.asarray(train), np.asarray(rollout, np.float64)
    g, n = _gap(train_a, rollout_a, np.ones(len(train_a), bool))
    mx = float(np.abs(train_a - rollout_a).max()) if n else 0.0
    return {"gap": g, "matched": n, "sampled": sampled, "max": mx, "ids": ids}


# ------------------------------------------------------------------ the three settings


def measure(policy: torch.nn.Module, trajs: Sequence[Trajectory], tokenizer) -> dict[str, Any]:
    """Settings (a), (b), (c) over the COMPLETED / TRUNCATED trajectories of `trajs`."""
    policy = policy.float().eval()
    used = [t for t in trajs if t.status in TRAINED and t.turns]
    segments, skipped = [], 0
    text, nbytes = _Pool(), _TokenBytes(tokenizer)
    matched = sampled = differ = 0
    for traj in used:
        try:
            segs = assemble(traj.turns, tokenizer).segments
        except TitoError:
            skipped += 1
            continue
        segments += segs
        a = retokenized_gap(policy, traj, tokenizer, nbytes)
        text.add(a["gap"], a["matched"], a["max"])
        matched += a["matched"]
        sampled += a["sampled"]
        # Does re-encoding the text change the ids anywhere (context included)?
        tito = np.concatenate([s.ids for s in segs]) if len(segs) == 1 else None
        differ += tito is None or a["ids"][: len(tito)] != tito.tolist()
    bc = replay_check(policy, segments)
    return {
        "trajectories": len(used) - skipped,
        "turns": sum(len(t.turns) for t in used),
        "tito_errors": skipped,
        "a_text_retokenized": {
            "gap": text.mean,
            "max": text.max,
            "matched_tokens": matched,
            "sampled_tokens": sampled,
            "token_drift_rate": 1 - matched / sampled if sampled else 0.0,
            "streams_differing_from_tito": differ,
        },
        "b_tito": {
            "gap": bc["gap_live"],
            "max": bc["gap_live_max"],
            "loss_tokens": bc["loss_tokens"],
            "routing_differs_rate": bc["live_differs_rate"],
        },
        "c_tito_r3": {
            "gap": bc["gap_replay"],
            "max": bc["gap_replay_max"],
            "loss_tokens": bc["loss_tokens"],
            "replay_mismatch": bc["replay_mismatch"],
        },
        "routed_positions": bc["positions"],
        "guards": guard_checks(policy, [t for t in used if t.turns], segments, tokenizer, bc),
    }


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


def warm_start(
    policy: torch.nn.Module, trajs: Sequence[Trajectory], tokenizer, steps: int, lr: float = 3e-3
) -> list[float]:
    """`steps` SFT steps (loss on the sampled tokens of the TITO streams, 2 rows a step)."""
    from t1.ppo.losses import masked_mean
    from t1.train.batch import Row, collate
    from t1.train.hf import HFTrainer

    rows = [
        Row(s.ids, s.loss_mask)
        for t in trajs
        if t.status in TRAINED
        for s in assemble(t.turns, tokenizer).segments
    ]
    if steps <= 0 or not rows:
        return []
    trainer = HFTrainer(policy, None, actor_lr=lr, replay=False, seed=0)
    losses = []
    for step in range(steps):
        idx = trainer.permutation(len(rows))[:2]
        batch = collate([rows[i] for i in idx])
        m = trainer.actor_update(batch, lambda lp, b: (-masked_mean(lp, b.loss_mask), {}))
        losses.append(float(-masked_mean(trainer.actor_forward(batch).logp, batch.loss_mask)))
        print(
            f"sft step {step + 1}/{steps}: loss {losses[-1]:.3f} (grad norm {m['grad_norm']:.2f})",
            file=sys.stderr,
        )
    policy.eval()
    return losses


# ------------------------------------------------------------------ command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="campaign YAML (model, engine, agent, sandbox); default: built-in"
    )
    parser.add_argument(
        "--rollout", help="measure trajectories already written by `t1 rollout` here"
    )
    parser.add_argument("--policy", help="the policy directory that produced --rollout")
    parser.add_argument(
        "--tokenizer", help="tokenizer directory (default: trajectories' metadata / cached BPE)"
    )
    parser.add_argument(
        "--trajectories", type=int, default=20, help="rollouts to sample (default 20)"
    )
    parser.add_argument(
        "--sft-steps", type=int, default=30, help="warm-start SFT steps (0 = random init)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per turn (default 64)")
    parser.add_argument("--max-turns", type=int, default=4, help="per trajectory (default 4)")
    parser.add_argument("--tasks", nargs="+", default=["workflow/tasks"], help="task dirs")
    parser.add_argument("--save-policy", help="also save the (warm-started) policy here")
    parser.add_argument("--save-rollout", help="also write the sampled trajectories here")
    parser.add_argument("--json", help="write the figures here")


def _sample(
    args: argparse.Namespace, cfg, tokenizer
) -> tuple[torch.nn.Module, list[Trajectory], dict[str, Any]]:
    """Build (and warm-start) the policy, then sample rollouts with the bf16 local engine."""
    from t1.engine.local import LocalEngine
    from t1.model.policy import build_policy
    from t1.rollout.collect import collect, expert_batch, load_tasks

    tasks = load_tasks(args.tasks)
    policy = build_policy(cfg.model, len(tokenizer), seed=cfg.run.seed)
    info: dict[str, Any] = {
        "policy": "random init" if args.sft_steps <= 0 else f"{args.sft_steps} SFT steps"
    }
    t0 = time.monotonic()
    if args.sft_steps > 0:
        experts = expert_batch(tasks, tokenizer, cfg, reward=BENCH_REWARD).admitted
        info["sft_losses"] = warm_start(policy, experts, tokenizer, args.sft_steps)
    info["sft_s"] = time.monotonic() - t0
    cfg = dataclasses.replace(
        cfg,
        engine=dataclasses.replace(
            cfg.engine, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens
        ),
        agent=dataclasses.replace(cfg.agent, max_turns=args.max_turns),
    )
    engine = LocalEngine(
        copy.deepcopy(policy), dtype=cfg.engine.dtype, max_batch=cfg.engine.max_batch
    )
    batch_tasks = [tasks[i % len(tasks)] for i in range(args.trajectories)]
    t0 = time.monotonic()
    batch = collect(
        batch_tasks,
        engine,
        tokenizer,
        cfg,
        admit=len(batch_tasks),
        seed=cfg.run.seed,
        reward=BENCH_REWARD,
    )
    info["rollout_s"] = time.monotonic() - t0
    info["by_status"] = batch.summary()["by_status"]
    if args.save_policy:
        from t1.model.policy import save_policy

        save_policy(policy, args.save_policy)
    if args.save_rollout:
        from t1.rollout.collect import write_batch

        write_batch(batch, Path(args.save_rollout), args.tokenizer)
    return policy, batch.admitted, info


def main(args: argparse.Namespace) -> int:
    from t1.agent.tokenizer import load_tokenizer
    from t1.agent.tokenizer_train import bpe_tokenizer
    from t1.config import Config, load_config

    cfg = load_config(args.config) if args.config else Config()
    torch.set_num_threads(cfg.run.threads)
    t0 = time.monotonic()
    if args.rollout:
        from t1.agent.trajectory import find_trajectories, load_trajectory
        from t1.model.policy import load_policy

        if not args.policy:
            print(
                "t1 bench gap: --rollout needs --policy (the weights that sampled it)",
                file=sys.stderr,
            )
            return 2
        trajs = [load_trajectory(p) for p in find_trajectories(Path(args.rollout) / "trajectories")]
        tok_dir = args.tokenizer or next(
            (t.metadata.get("tokenizer") for t in trajs if t.metadata.get("tokenizer")), None
        )
        tokenizer = load_tokenizer(tok_dir) if tok_dir else bpe_tokenizer()
        policy = load_policy(args.policy)
        info: dict[str, Any] = {"policy": str(args.policy), "rollout": str(args.rollout)}
    else:
        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else bpe_tokenizer()
        policy, trajs, info = _sample(args, cfg, tokenizer)
    result = {
        "schema_version": 1,
        "status": "complete",
        **info,
        **measure(policy, trajs, tokenizer),
    }
    result["seconds"] = time.monotonic() - t0
    a, b, c = result["a_text_retokenized"], result["b_tito"], result["c_tito_r3"]
    print(
        f"train-inference gap over {result['trajectories']} trajectories ({result['turns']} turns), "
        f"policy: {result['policy']}\n"
        f"  (a) text retokenized, no TITO, no R3: {a['gap']:.5f}  (max {a['max']:.4f}; "
        f"{a['matched_tokens']} of {a['sampled_tokens']} sampled tokens matched, token drift "
        f"{100 * a['token_drift_rate']:.2f}%; {a['streams_differing_from_tito']} streams re-encode "
        f"differently from TITO)\n"
        f"  (b) TITO, no R3:                     {b['gap']:.5f}  (max {b['max']:.4f}; "
        f"{b['loss_tokens']} loss tokens; live routing differs at {100 * b['routing_differs_rate']:.2f}% "
        f"of {result['routed_positions']} positions)\n"
        f"  (c) TITO + R3:                       {c['gap']:.5f}  (max {c['max']:.4f}; replayed "
        f"routing mismatches {c['replay_mismatch']})"
    )
    g = result["guards"]
    print(
        f"guards on / off: experts used differ from the capture at {g['replay_mismatch_on']} / "
        f"{g['replay_mismatch_off']} of {g['routed_positions']} positions (live routing differs "
        f"at {g['live_mismatch_on']} / {g['live_mismatch_off']}); drift vs the engine's ids "
        f"{g['drift']['on']} / {g['drift']['off']} of {g['drift']['loss_tokens']} loss tokens "
        f"(re-tokenized stream, old self-check: {g['drift']['off_old_check']})"
    )
    if args.json:
        write_json_atomic(args.json, result)
    return 0
