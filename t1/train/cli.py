"""`t1 train`: one training stage from a starting point to an output directory.

    t1 train --config FILE --stage pretrain                      --from POLICY_DIR --out DIR --tokenizer TOK
    t1 train --config FILE --stage sft           --in TRAJ_DIR   --from POLICY_DIR --out DIR
    t1 train --config FILE --stage critic_warmup --in POOL_DIR   --from SFT_DIR    --out DIR
    t1 train --config FILE --stage ppo           --in ROLLOUT_DIR --from CKPT_DIR  --out DIR
                                                 [--critic WARMUP_DIR]

--in     a directory of trajectory records (t1/agent/trajectory.py), searched recursively; may be
         given more than once. sft: expert trajectories (executed reference solutions);
         critic_warmup: a binary-reward pool; ppo: the admitted rollouts of this step.
--from   where the weights come from:
           sft            a policy directory (`t1 init-policy --out`, or any DIR/actor)
           critic_warmup  an SFT output DIR (its actor is the frozen policy and the critic's
                          backbone initialisation)
           ppo            an SFT output DIR (first step) or the previous PPO step's DIR
--critic (ppo) a critic_warmup output DIR: on the first step (--from an SFT DIR) load only
         its critic weights; that step and the next up to `critic_warmup.recalibration_rollouts`
         (default 2) ppo steps in all update the critic only, then policy steps begin. Ignored
         when --from is a PPO step (the critic is in its checkpoint). Without --critic, or
         with `critic_warmup.enabled: false`, the critic starts cold (policy backbone + fresh
         value head).
--out    the output directory:
           DIR/ckpt/step_N/   full trainer state (actor, critic, both optimizers, RNG states,
                              counters, data cursor): atomic t1.store.ckpt checkpoints, newest
                              `campaign.keep_checkpoints` kept; a corrupt newest one is
                              reported and skipped
           DIR/actor/         policy weights for the engine (t1.model.policy format)
           DIR/critic/        critic weights
           DIR/metrics.jsonl  one JSON event per optimizer step / stage end (+ tensorboard/)
           DIR/DONE.json      {"schema_version", "status": "complete", "stage", ...}, last
--tokenizer DIR   tokenizer directory for TITO's retokenized relation (default: the one the
                  trajectories recorded in their metadata; our own agent loop never needs it)
--max-steps N     stop after N optimizer steps (smoke runs); the stage is then not DONE
--restart-stage   start the stage over although DIR/ckpt holds checkpoints none of which is
                  usable (they are moved to DIR/ckpt.discarded-TIME); without it that is an error
                  naming them (a stage never silently starts fresh over its own checkpoints)

One writer per DIR: `t1 train` holds DIR/.t1-writer.lock (t1.store.lock) for its whole life; a second
`t1 train` on the same DIR exits 4 naming the holder's pid.

Resumable: a DIR with DONE.json is left alone (exit 0); a DIR with a complete checkpoint under
DIR/ckpt but no DONE.json continues from the newest one (sft saves every `sft.save_every`
steps, critic warm-up every `critic_warmup.save_every`); otherwise the stage starts from
--from. On SIGUSR2 / SIGTERM (t1 supervise, Slurm) sft and critic_warmup save a checkpoint
at the next optimizer-step boundary and exit 75; a ppo step (short) is finished first.
Above world size 1 (`torchrun --nproc-per-node N -m t1.cli train --stage ppo ...`, train.backend
megatron): every rank loads the same rows and trains its share; rank 0 holds the lock and writes
metrics.jsonl, DONE.json, actor/ and critic/; checkpoints are per rank (t1/train/megatron/stage.py).
sft and critic_warmup run the same way (t1/train/stage.py); with train.backend megatron and
train.gpus > 1, `t1 train --stage sft|critic_warmup` started outside torchrun launches itself inside a
Slurm allocation (srun + torchrun over its nodes) and is refused elsewhere (exit 2) with the torchrun
line to run (t1/train/launch.py).
Exit codes: 0 done (or --max-steps reached), 2 bad arguments/config, 3 input records missing,
malformed or without a trainable trajectory, 4 another writer holds DIR, 5 checkpoints exist but
none is usable (see --restart-stage), 75 stopped by a signal (rerun to resume).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

STAGES = ("pretrain", "sft", "critic_warmup", "ppo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="campaign YAML (t1/config.py)")
    parser.add_argument("--stage", required=True, choices=STAGES)
    parser.add_argument(
        "--in",
        dest="inputs",
        action="append",
        help="trajectory directory (repeatable; every stage but pretrain)",
    )
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        help="policy / SFT / checkpoint directory to start from",
    )
    parser.add_argument("--out", required=True, help="output directory (resumable)")
    parser.add_argument("--critic", default=None, help="ppo: critic_warmup output directory")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer.json (if template glue is needed)"
    )
    parser.add_argument("--max-steps", type=int, default=None, help="stop after N optimizer steps")
    parser.add_argument(
        "--push-to",
        default=None,
        help="ppo: comma-separated replica URLs: push the step's actor to them over a "
        "process group (fleet.weight_update distributed; t1/train/push.py)",
    )
    parser.add_argument(
        "--restart-stage",
        action="store_true",
        help="start over although DIR/ckpt holds checkpoints, none usable (moved aside)",
    )


def main(args: argparse.Namespace) -> int:
    import importlib

    import torch

    from t1.config import ConfigError, load_config
    from t1.supervise.child import StopRequest

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"t1 train: {e}")
        return 2
    if args.stage != "pretrain" and not args.inputs:
        print(f"t1 train: --stage {args.stage} needs --in (a trajectory directory)")
        return 2
    if args.stage == "ppo" and args.critic and not Path(args.critic, "critic").is_dir():
        print(f"t1 train: --critic {args.critic}: no critic/ directory (a critic_warmup output?)")
        return 2
    from t1.train.launch import LaunchError, launch_command

    try:  # megatron above one GPU: under torchrun (srun + torchrun inside Slurm), t1/train/launch.py
        launch = launch_command(cfg, args)
    except LaunchError as e:
        print(f"t1 train: {e}")
        return 2
    if launch is not None:
        import shlex
        import sys

        print(f"t1 train: launching {shlex.join(launch)}", flush=True)
        sys.stderr.flush()
        os.execvp(launch[0], launch)  # the ranks take the lock below (rank 0)
    from t1.store.lock import LockHeld, hold_output
    from t1.train.state import UnusableCheckpoints, check_fresh_start

    lead = int(os.environ.get("RANK", "0")) == 0
    try:  # one writer per output directory, inherited by anything this process starts
        if lead:  # torchrun: rank 0 holds it for all ranks
            hold_output(args.out, f"t1 train --stage {args.stage}")
    except LockHeld as e:
        print(f"t1 train: {e}")
        return 4
    if args.stage != "ppo":  # ppo falls back along its chain of steps (t1/train/ppo.py)
        restart = getattr(args, "restart_stage", False)  # callers building args by hand
        if restart and not lead:  # rank 0 alone moves the checkpoints aside
            restart = None
        try:
            if restart is not None:
                check_fresh_start(args.out, args.stage, restart=restart)
        except UnusableCheckpoints as e:
            print(f"t1 train: {e}")
            return 5
    torch.set_num_threads(cfg.run.threads)
    if cfg.run.deterministic:  # bit-identical reruns: deterministic kernels, fixed threads
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(cfg.run.seed)
    stop = StopRequest()  # SIGUSR2 / SIGTERM: save at the next step boundary, exit 75
    module = importlib.import_module(f"t1.train.{args.stage}")
    return module.run(cfg, args, stop)
