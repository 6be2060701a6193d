"""The PPO stage: one critic-first PPO step on one step's admitted rollouts.

    t1 train --config FILE --stage ppo --in ROLLOUT_DIR --from PREV_DIR --out DIR [--critic W]

PREV_DIR is the previous step's DIR (its newest checkpoint under PREV_DIR/ckpt: actor,
critic, both optimizers, RNG, counters, the gap EMA, the step index and the re-calibration
countdown are restored exactly) or, for the first step, an SFT DIR (its actor; fresh
optimizers). On the first step the critic is loaded from W/critic when given and
`critic_warmup.enabled` (then the next `critic_warmup.recalibration_rollouts` steps update
the critic only), else built cold from the actor's backbone with a fresh head. --critic is
ignored when PREV_DIR holds a checkpoint.

Trains on the COMPLETED and TRUNCATED trajectories with a reward (t1.train.data); a step
without any (every rollout failed) carries the state forward unchanged and says so. Writes
DIR/actor (for the next rollout), DIR/critic, DIR/ckpt/step_N, one `ppo_step` event in
DIR/metrics.jsonl (+ TensorBoard), DIR/DONE.json (with the metrics). If DIR/ckpt already
holds the finished step (a crash after it was written), only the weights and DONE.json are
redone.

Fallback, never fresh: each step records its arguments in DIR/step.json first. When PREV_DIR
is a finished PPO step whose checkpoint is corrupt or gone, the state after it is rebuilt from
the newest good checkpoint up the chain (PREV_DIR's own --from, and so on) by redoing the lost
steps on their recorded rollouts - the same RNG states, the same rows, so the same weights; step
numbers stay. Each redo is a `checkpoint_fallback` incident in DIR/incidents.jsonl (outside
DIR/ckpt, so pruning keeps it; `t1 report` lists it). A chain that cannot be rebuilt (no
step.json, inputs gone) is an error naming the checkpoints, never a fresh start.

Under torchrun (WORLD_SIZE > 1, train.backend megatron only) every rank runs this on the same
rows; checkpoints are per rank (t1.train.megatron.stage), rank 0 writes step.json, metrics and
DONE.json, each pipeline stage's leader its part of the HF export (megatron/export.py); a checkpoint of another layout is refused (exit 5).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from t1.config import Config
from t1.records import write_json_atomic
from t1.store.ckpt import list_step_dirs
from t1.store.incidents import IncidentLog
from t1.supervise.child import EXIT_REQUEUE, heartbeat
from t1.train import roles
from t1.train.batch import collate
from t1.train.critic_warmup import recalibrate
from t1.train.data import DataError, load_rows
from t1.train.megatron.plan import build as build_trainer  # train.backend: hf | megatron
from t1.train.megatron.stage import (
    LayoutChanged,
    agreed_stop,
    lead,
    metrics_log,
    open_stage_dir,
    record_load,
    world_size,
)
from t1.train.state import load_tokenizer_for
from t1.train.step import ppo_step


def _fresh(cfg: Config, source: Path, critic_dir: str | None):
    """The first step's trainer: the actor of source/actor, the warmed-up critic of
    critic_dir/critic or a cold one (t1.train.roles: whole modules on hf, per-rank reads on
    megatron)."""
    actor = roles.actor(cfg, source / "actor")
    warm = bool(critic_dir) and cfg.critic_warmup.enabled
    if warm:
        critic = roles.critic(cfg, warm=critic_dir)
    else:
        critic = roles.critic(cfg, actor_dir=source / "actor", policy=actor)
    trainer = build_trainer(cfg, actor, critic)
    progress = {
        "step": 0,
        "gap_ema": None,
        "recalibration_left": cfg.critic_warmup.recalibration_rollouts if warm else 0,
        "critic_start": "warm" if warm else "cold",
        "done": False,
        # the policy PPO started from: ppo.kl_coef's reference in every later step
        "reference": str((source / "actor").resolve()),
    }
    attach_reference(trainer, cfg, progress)
    return trainer, progress


def attach_reference(trainer, cfg: Config, progress: dict[str, Any]) -> None:
    """With ppo.kl_coef > 0, load the run's reference policy (the actor PPO started from,
    recorded in the progress at step 0) into the trainer, frozen. Raises ChainBroken naming
    the problem when the run has no recorded reference or its directory is gone (the megatron
    trainer never gets here: check_plan refuses kl_coef > 0 when the trainer is built)."""
    if cfg.ppo.kl_coef <= 0:
        return
    ref = progress.get("reference")
    if not ref:
        raise ChainBroken(
            "ppo.kl_coef > 0 but this run's checkpoint records no reference policy (its PPO "
            "started before the reference was recorded); set ppo.kl_coef: 0 or start the PPO "
            "stage again"
        )
    if not (Path(ref) / "config.json").is_file():
        raise ChainBroken(f"ppo.kl_coef > 0: the reference policy {ref} is gone (no config.json)")
    import torch

    with torch.random.fork_rng(devices=[]):  # loading consumes no RNG the run sees
        model = roles.actor(cfg, ref)
    for p in model.parameters():
        p.requires_grad_(False)
    trainer.reference = model.eval()


def _resumed(cfg: Config, source: Path, payload: dict[str, Any]):
    """Models shaped like source/actor, then everything from the saved state."""
    actor = roles.actor(cfg, source / "actor", shape_only=True)
    critic = roles.critic(cfg, actor_dir=source / "actor", shape_only=True)
    trainer = build_trainer(cfg, actor, critic)
    trainer.load_state_dict(payload["trainer"])
    progress = dict(payload["progress"])
    attach_reference(trainer, cfg, progress)
    return trainer, progress


def campaign_step(trainer, batch, cfg: Config, progress: dict[str, Any]) -> dict[str, Any]:
    """One step of the campaign on `batch`: a critic-only re-calibration step while
    `progress["recalibration_left"]` lasts (after loading warm-up weights), else a critic-first
    PPO step. Updates `progress` (the countdown, the gap EMA); returns the step's metrics."""
    if progress["recalibration_left"] > 0:
        m = recalibrate(trainer, batch, cfg.ppo, progress["gap_ema"])
        progress["recalibration_left"] -= 1
    else:
        m = ppo_step(trainer, batch, cfg.ppo, gap_ema=progress["gap_ema"])
    progress["gap_ema"] = m["gap_ema"]
    return m


def _stage_of(path: Path) -> str | None:
    """The stage that wrote `path` (its DONE.json), None if it holds no finished stage."""
    done = path / "DONE.json"
    return json.loads(done.read_text()).get("stage") if done.exists() else None


STEP_RECORD = "step.json"
PUSH_RECORD = "weight_push.json"  # --push-to: what the distributed weight update did


class ChainBroken(RuntimeError):
    """The state after a PPO step can be neither loaded nor rebuilt; the message says why."""


def _rows(cfg: Config, inputs: list[str], tokenizer_dir: str | None):
    tokenizer = load_tokenizer_for(tokenizer_dir, inputs)
    return load_rows(inputs, tokenizer, reward="trajectory")


def _train(trainer, cfg: Config, progress: dict[str, Any], rows, stats) -> dict[str, Any]:
    """The step itself on `rows` (none: the state goes on unchanged); returns its metrics."""
    if not rows:
        return {"empty": True, **stats}
    m = campaign_step(trainer, collate(rows), cfg, progress)
    metrics = {k: v for k, v in m.items() if not k.startswith("_")}
    metrics.update(
        stats,
        critic_start=progress["critic_start"],
        recalibration_left=progress["recalibration_left"],
    )
    return metrics


def state_after(cfg: Config, step_dir: Path, incidents: IncidentLog, depth: int = 0):
    """(trainer, progress) as they were right after the PPO step in `step_dir` finished: its
    newest good checkpoint, or - when that is corrupt or gone - the state after the step
    before it (recursively) with this step redone on its recorded rollouts."""
    payload = open_stage_dir(step_dir, "ppo").load()  # per-rank above world size 1
    if payload is not None:
        trainer, progress = _resumed(cfg, step_dir, payload)
        progress["done"] = False
        return trainer, progress
    record = step_dir / STEP_RECORD
    ckpts = ", ".join(str(p) for _, p in list_step_dirs(step_dir / "ckpt")) or "none"
    try:
        args = json.loads(record.read_text())
    except (OSError, ValueError) as e:
        raise ChainBroken(
            f"{step_dir}: no usable checkpoint (checkpoints: {ckpts}) and no readable "
            f"{record} to redo the step from ({e}); refusing to start PPO fresh"
        ) from None
    source = Path(args["source"])
    if _stage_of(source) == "ppo":
        trainer, progress = state_after(cfg, source, incidents, depth + 1)
    else:
        trainer, progress = _fresh(cfg, source, args.get("critic"))
    try:
        rows, stats = _rows(cfg, args["inputs"], args.get("tokenizer"))
    except DataError as e:
        raise ChainBroken(f"{step_dir}: cannot redo the step: its rollouts: {e}") from None
    step = progress["step"]
    _train(trainer, cfg, progress, rows, stats)
    progress["step"] = step + 1
    incidents.write(
        "checkpoint_fallback", stage="ppo", step=step, path=str(step_dir / "ckpt"),
        checkpoints=ckpts, redone_from=str(source), depth=depth,
        action=f"redid step {step} on its rollouts {args['inputs']}",
    )  # fmt: skip
    print(f"t1 train ppo: {step_dir}: checkpoint unusable; redid step {step} from {source}")
    return trainer, progress


def _push(cfg: Config, args: argparse.Namespace, trainer, out: Path) -> None:
    """--push-to: the step's actor straight to the rollout replicas (fleet.weight_update
    distributed; t1.train.push), before DONE.json; every rank calls it. A failed push does not
    fail the step (the fleet loads OUT/actor from disk instead); rank 0 records it in
    OUT/weight_push.json."""
    urls = [u for u in (getattr(args, "push_to", None) or "").split(",") if u]
    if not urls:
        return
    from t1.engine.weight_update import version_of
    from t1.train.push import push_actor

    f = cfg.fleet
    res = push_actor(
        trainer,
        urls,
        version_of(out / "actor"),
        bucket_bytes=f.weight_bucket_mb << 20,
        ranks_per_replica=f.tp if f.server == "sglang" else 1,
        timeout_s=max(60.0, f.health_timeout_s * f.health_failures),  # a hung replica: give up
    )
    if lead():
        status = "complete" if res["ok"] else "failed"
        write_json_atomic(out / PUSH_RECORD, {"schema_version": 1, "status": status, **res})
        what = (
            "pushed" if res["ok"] else f"NOT pushed ({res['error']}; the fleet loads it from disk)"
        )
        print(f"t1 train ppo: actor {what} to {len(urls)} replica(s)", flush=True)


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    out = open_stage_dir(args.out, "ppo", keep=cfg.campaign.keep_checkpoints)
    if out.done():
        print(f"t1 train ppo: {out.done_file} exists; nothing to do")
        return 0
    if world_size() > 1 and cfg.train.backend != "megatron":
        print(
            f"t1 train ppo: world size {world_size()} (torchrun) needs train.backend megatron, "
            f"got {cfg.train.backend!r} (the hf trainer is one process)"
        )
        return 2
    source = Path(args.source)
    if lead():  # torchrun: rank 0 writes the stage's files, every rank trains
        write_json_atomic(
            out.path / STEP_RECORD,
            {"inputs": [str(Path(i).resolve()) for i in args.inputs],
             "source": str(source.resolve()),
             "critic": str(Path(args.critic).resolve()) if args.critic else None,
             "tokenizer": str(Path(args.tokenizer).resolve()) if args.tokenizer else None},
        )  # fmt: skip
    try:
        own = out.load()
        if own is not None and own["progress"].get("done"):
            trainer, progress = _resumed(cfg, source, own)
    except (ChainBroken, LayoutChanged) as e:
        print(f"t1 train ppo: {e}")
        return 5
    if own is not None and own["progress"].get("done"):
        trainer.save_weights(out.path)
        _push(cfg, args, trainer, out.path)
        out.finish({"step": progress["step"] - 1, "resumed": True})
        return 0
    incidents = IncidentLog(out.incidents if lead() else None)
    try:
        if _stage_of(source) == "ppo":
            trainer, progress = state_after(cfg, source, incidents)
        else:
            trainer, progress = _fresh(cfg, source, args.critic)
            record_load(out.path, trainer)  # each rank: what it read of the HF weights
        rows, stats = _rows(cfg, args.inputs, args.tokenizer)
    except (ChainBroken, LayoutChanged) as e:
        print(f"t1 train ppo: {e}")
        return 5
    except DataError as e:
        print(f"t1 train ppo: {e}")
        return 3
    if agreed_stop(stop).requested:  # every rank stops at the same point (collectives)
        return EXIT_REQUEUE
    step = progress["step"]
    with metrics_log(out.path) as log:  # rank 0's only above world size 1
        metrics = _train(trainer, cfg, progress, rows, stats)
        log.write("ppo_step", step, **metrics)
        heartbeat()
        progress["step"] = step + 1
        progress["done"] = True
        out.save(trainer, progress)
        trainer.save_weights(out.path)
    _push(cfg, args, trainer, out.path)
    out.close()
    out.finish({"step": step, "metrics": metrics})
    return 0
