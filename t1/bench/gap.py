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

Where: the trainer-side forward and the gap, t1/bench/gap_forward.py; setting (a),
t1/bench/gap_text.py; settings (b) and (c) with the replay and drift guards,
t1/bench/gap_replay.py.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from t1.agent.trajectory import Status, Trajectory
from t1.bench.gap_forward import _Pool
from t1.bench.gap_replay import guard_checks, replay_check
from t1.bench.gap_text import _TokenBytes, retokenized_gap
from t1.records import write_json_atomic
from t1.tito import TitoError, assemble
from t1.verify.reward import RewardSpec

TRAINED = (Status.COMPLETED, Status.TRUNCATED)
BENCH_REWARD = RewardSpec("dense", 10.0)  # the rewards play no part in the gap


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
    from t1.rollout.collect import collect, expert_batch, launched_tasks, load_tasks

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
    batch_tasks = launched_tasks(tasks, args.trajectories)
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
