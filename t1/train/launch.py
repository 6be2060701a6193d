"""How `t1 train --stage sft|critic_warmup` gets its torchrun world (train.backend megatron).

    from t1.train.launch import LaunchError, launch_command
    cmd = launch_command(cfg, args)   # None: train in this process; else exec it

With `train.backend: megatron` and `train.gpus` > 1 these stages train under torchrun, one
rank per GPU, like the PPO segment's trainer (t1.run.plan.trainer_command). `t1 train`
started outside torchrun (no WORLD_SIZE in its environment) then:
* inside a Slurm allocation (SLURM_JOB_ID set; the sft / warmup_critic rules' jobs): execs
  `srun --nodes=N --ntasks-per-node=1 --nodelist=... --kill-on-bad-exit=1 [--overlap]
  [--gpus-per-node=G] torchrun --nnodes=N --nproc-per-node=P --rdzv-backend=c10d
  --rdzv-endpoint=HEAD:29500 --rdzv-id=t1-STAGE-JOBID -m t1.cli train <the same arguments>`
  over the first N of the allocation's nodes (scontrol show hostnames), P = campaign.gpus per
  node (N = train.gpus / P; on a CPU allocation, campaign.gpus 0, the ranks share the nodes
  evenly). `--overlap` when this process already runs in a job step (snakemake's Slurm
  executor runs each job's shell inside `srun`): that step holds the allocation, and the
  trainer's step must share it. Each rank then sees WORLD_SIZE and trains
  (t1/train/stage.py); the exit status is srun's (torchrun reports a failed rank as 1, so a
  stopped stage's 75 arrives as a failure and the rerun resumes from its checkpoint).
* outside Slurm: refused (exit 2) with the torchrun line to run instead.
With train.backend hf, train.gpus 1, or already under torchrun: None, the stage trains here.

Why here and not in the rules: the same `t1 train` line then works from Snakemake (local or
Slurm profile), an interactive salloc, or by hand; the rules stay one plain `t1 train` line.
t1.run (a later stage) builds the PPO segment's trainer line itself; this module is the
stage-level equivalent for the jobs whose whole allocation is the trainer's.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from typing import Any

RDZV_PORT = 29500  # torchrun's c10d rendezvous (the PPO segment's too: t1.run.plan)
SELF_LAUNCHED = ("sft", "critic_warmup")


class LaunchError(RuntimeError):
    """The stage needs a torchrun world this process cannot start; the message says how."""


def train_argv(args: argparse.Namespace) -> list[str]:
    """`t1 train`'s arguments back from the parsed namespace (t1/train/cli.py)."""
    out = ["--config", str(args.config), "--stage", args.stage]
    for d in args.inputs or []:
        out += ["--in", str(d)]
    out += ["--from", str(args.source), "--out", str(args.out)]
    for flag, value in (
        ("--critic", getattr(args, "critic", None)),
        ("--tokenizer", getattr(args, "tokenizer", None)),
        ("--max-steps", getattr(args, "max_steps", None)),
    ):
        if value is not None:
            out += [flag, str(value)]
    if getattr(args, "restart_stage", False):
        out.append("--restart-stage")
    return out


def in_job_step(env: Mapping[str, str] | None = None) -> bool:
    """This process runs inside a Slurm job step (snakemake's Slurm executor runs a rule's shell
    in `srun -n1`): a nested srun then needs --overlap or it waits for CPUs forever (measured
    on Slurm 22.05). The batch script itself is step "batch"."""
    env = os.environ if env is None else env
    return bool(env.get("SLURM_STEP_ID")) and env.get("SLURM_STEP_ID") != "batch"


def slurm_command(
    cfg: Any, argv: list[str], stage: str, hosts: list[str], job_id: str, in_step: bool
) -> list[str]:
    """srun + torchrun over `hosts` (the allocation's nodes) for train.gpus ranks."""
    gpus, per_gpu_node = cfg.train.gpus, cfg.campaign.gpus
    per_node = per_gpu_node if per_gpu_node > 0 else math.ceil(gpus / max(1, len(hosts)))
    nodes = math.ceil(gpus / per_node)
    if gpus % per_node or nodes > len(hosts):
        raise LaunchError(
            f"train.gpus {gpus} at {per_node} per node (campaign.gpus {per_gpu_node}) needs "
            f"{nodes} whole node(s); the allocation has {len(hosts)} ({', '.join(hosts)}): "
            "set campaign.nodes / campaign.gpus to hold train.gpus"
        )
    nproc = per_node if nodes > 1 else gpus
    srun = [
        "srun",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts[:nodes])}",
    ]
    srun += [f"--job-name=t1-{stage}", "--kill-on-bad-exit=1"]
    if in_step:
        srun.append("--overlap")
    if per_gpu_node > 0:
        srun.append(f"--gpus-per-node={per_gpu_node}")
    torchrun = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={nproc}"]
    torchrun += ["--rdzv-backend=c10d", f"--rdzv-endpoint={hosts[0]}:{RDZV_PORT}"]
    torchrun += [f"--rdzv-id=t1-{stage}-{job_id}", "-m", "t1.cli", "train", *argv]
    return [*srun, *torchrun]


def launch_command(
    cfg: Any, args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> list[str] | None:
    """None when the stage trains in this process, else the command to exec (see the module
    docstring); raises LaunchError when it can be neither."""
    env = os.environ if env is None else env
    t = cfg.train
    if args.stage not in SELF_LAUNCHED or t.backend != "megatron" or t.gpus <= 1:
        return None
    if "WORLD_SIZE" in env:  # torchrun's rank (or a world set up already)
        return None
    argv = train_argv(args)
    if not env.get("SLURM_JOB_ID"):
        raise LaunchError(
            f"--stage {args.stage}: train.backend megatron with train.gpus {t.gpus} trains under "
            f"torchrun, one rank per GPU; run `torchrun --nproc-per-node {t.gpus} -m t1.cli "
            f"train {' '.join(argv)}` (one node), or this same `t1 train` line inside a Slurm "
            "allocation (sbatch / salloc, the workflow's slurm profile), which launches srun + "
            "torchrun itself"
        )
    from t1.engine.allocation import allocation_hosts

    hosts, why = allocation_hosts(cfg)
    if not hosts:
        raise LaunchError(f"--stage {args.stage}: cannot list the Slurm allocation's nodes: {why}")
    in_step = in_job_step(env)
    return slurm_command(cfg, argv, args.stage, hosts, env["SLURM_JOB_ID"], in_step)
