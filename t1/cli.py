"""The `t1` command: one subcommand per workflow rule, each in the module named here.

    t1 --help                 list subcommands
    t1 <subcommand> --help    that subcommand's options

Every subcommand module defines `add_arguments(parser)` and `main(args) -> int` (the exit
code). Modules are imported lazily so that `t1 tasks check` does not pay for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Reproducible CPU math (set before any subcommand imports torch, which loads MKL): by default
# MKL may use fewer threads than asked when the machine is busy (MKL_DYNAMIC), and a matmul
# split over fewer threads can differ in the last bit. Suspected cause of a one-ulp difference
# (in the larger matmuls only) between a redone PPO step and the uninterrupted run, seen once in
# the crash/resume e2e test on a loaded machine. `run.deterministic` promises bit-identical
# reruns, so every t1 process keeps the thread count it asked for; an environment that sets
# MKL_DYNAMIC explicitly wins.
os.environ.setdefault("MKL_DYNAMIC", "FALSE")

# name -> (module, one-line help). Keep sorted by pipeline stage.
COMMANDS: dict[str, tuple[str, str]] = {
    "run-config": ("t1.run.campaign", "derive, validate and pin a run's config (RESULTS/<run>)"),
    "tasks": ("t1.tasks.cli", "check task directories (v1 task.yaml / v2 task.toml layouts)"),
    "sandbox": ("t1.sandbox.cli", "run one command in a fresh sandbox"),
    "provision": (
        "t1.tasks.provision",
        "build the offline tool cache (wheels, uv, debs) for sandboxes",
    ),
    "families": (
        "t1.tasks.families",
        "generate learnable task families: train and held-out instances",
    ),
    "oracle": ("t1.verify.oracle", "run reference solutions (or nothing) and the verifiers"),
    "tokenizer": ("t1.agent.tokenizer_train", "train a byte-level BPE with ChatML specials"),
    "init-policy": ("t1.model.policy", "build the tiny MoE policy from the config and save it"),
    "base-model": (
        "t1.run.base_model",
        "check model.init_from against the config; link its tokenizer and weights",
    ),
    "serve": ("t1.engine.serve", "serve the local engine behind SGLang's /generate schema"),
    "rollout": ("t1.rollout.collect", "sample trajectories in sandboxes and score them"),
    "tito-audit": ("t1.tito.audit", "audit TITO streams of rollout directories"),
    "train": ("t1.train.cli", "train: --stage pretrain | sft | critic_warmup | ppo"),
    "plan-memory": ("t1.train.plan_memory", "per-GPU memory plan for actor and critic"),
    "segment": ("t1.run.segment", "run one PPO segment (K steps) from the newest checkpoint"),
    "supervise": (
        "t1.supervise.supervisor",
        "start and watch a segment's children; checkpoint on signal",
    ),
    "synth": ("t1.synth.cli", "recursive verified task synthesis"),
    "audit": ("t1.curate.audit", "score tasks with the audit weights; select"),
    "pool": ("t1.curate.pool", "materialize a ranked task pool with a manifest"),
    "evaluate": ("t1.eval.evaluate", "evaluate a policy checkpoint on a task set"),
    "report": ("t1.eval.report", "tables and plots from a run's JSON-lines events"),
    "ablations": (
        "t1.eval.ablations",
        "the paper's ablations beside ours: one table from the measured files",
    ),
    "bench": (
        "t1.bench",
        "benchmarks: sandbox | rollout | engine | train | ckpt | gap | critic | gpu | verifier | weights",
    ),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: t1 <subcommand> [options]", "", "subcommands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"t1: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"t1 {name}", description=text)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
