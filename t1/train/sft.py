"""SFT warm start: the actor learns the assistant tokens of expert trajectories.

    t1 train --config FILE --stage sft --in EXPERT_DIR --from POLICY_DIR --out DIR [--tokenizer TOK]

The expert trajectories are reference solutions executed as multi-turn tool calls in real
sandboxes (`t1 rollout --expert`: real observations, the reference's commands as the
"sampled" tokens). Each is assembled by TITO; the loss is the token-level mean negative
log-likelihood over the loss region (the assistant tokens), nothing on observations or
template glue. No routing replay (the expert's tokens were not sampled by our model).
AdamW as in PPO with `sft.lr`; `sft.epochs` passes of `sft.batch` rows, shuffled per epoch.
Writes DIR/actor (the supervised checkpoint every campaign starts from), DIR/ckpt/ (t1.ckpt),
DIR/metrics.jsonl (`sft_step` events), DIR/DONE.json.
"""

from __future__ import annotations

import argparse
import dataclasses

from t1.config import Config
from t1.metrics_log import MetricsLog
from t1.policy import load_policy, torch_dtype
from t1.ppo.losses import masked_mean
from t1.train.data import DataError, load_rows
from t1.supervise.child import EXIT_REQUEUE
from t1.train.state import StageDir, build_trainer, load_tokenizer_for, run_epochs


def nll(logp, batch):
    """Token-level mean NLL over the loss region. logp [B, T] -> 0-d loss and metrics."""
    loss = -masked_mean(logp, batch.loss_mask)
    return loss, {"loss": float(loss.detach())}


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    out = StageDir(args.out, "sft")
    if out.done():
        print(f"t1 train sft: {out.done_file} exists; nothing to do")
        return 0
    try:
        tokenizer = load_tokenizer_for(args.tokenizer, args.inputs)
        rows, stats = load_rows(args.inputs, tokenizer, require_reward=False)
    except DataError as e:
        print(f"t1 train sft: {e}")
        return 3
    if not rows:
        print(
            f"t1 train sft: no trainable expert trajectory under {', '.join(args.inputs)} ({stats})"
        )
        return 3
    actor = load_policy(args.source, dtype=torch_dtype(cfg.model.train_dtype))
    no_replay = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, replay=False))
    trainer = build_trainer(no_replay, actor, None, actor_lr=cfg.sft.lr)
    saved = out.load()
    progress = {}
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
        progress = saved["progress"]
        print(
            f"t1 train sft: resuming at step {progress.get('step')} (epoch {progress.get('epoch')})"
        )
    with MetricsLog(out.path) as log:

        def on_step(step, m):
            log.write("sft_step", step, **m)

        status = run_epochs(
            trainer, rows, cfg.sft.epochs, cfg.sft.batch, lambda mb: trainer.actor_update(mb, nll),
            progress, out, cfg.sft.save_every, on_step, stop, args.max_steps,
        )  # fmt: skip
        if status == "stopped":
            return EXIT_REQUEUE
        if status == "max_steps":
            return 0
        trainer.save_weights(out.path, actor=True, critic=False)
        out.save(trainer, progress, complete=True)
        log.write("sft_done", progress["step"], **stats)
    out.finish({"steps": progress["step"], "data": stats})
    return 0
