"""`t1 bench NAME`: benchmarks, each measured side by side in one run and printed as JSON.

    t1 bench sandbox [--json FILE]     (t1/bench/sandbox.py)
    t1 bench rollout                   (t1/bench/rollout.py)
    t1 bench engine                    (t1/bench/engine.py: deterministic decode, HF vs lean)
    t1 bench train                     (t1/bench/train.py)
    t1 bench ckpt                      (t1/bench/ckpt.py)
    t1 bench gap                       (t1/bench/gap.py: train-inference gap, 3 settings)
    t1 bench critic                    (t1/bench/critic.py: warm-up vs cold critic EV curves)
    t1 bench gpu                       (t1/bench/gpu.py: megatron backend, replay on/off, one GPU)
    t1 bench verifier                  (t1/bench/verifier.py: verifier seconds, proxy on/off)
    t1 bench weights                   (t1/bench/weights.py: weights to replicas, disk vs gloo)
    t1 bench segment                   (t1/bench/segment.py: PPO steps, warm vs fresh commands)

Each benchmark module defines `add_arguments(parser)` and `main(args) -> int`. Figures go into
LOG.md with the date and the command; tests never assert timings.

Pipeline stage 16 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo, train,
synth, curate, run.
"""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = (
    "sandbox",
    "rollout",
    "engine",
    "train",
    "ckpt",
    "gap",
    "critic",
    "gpu",
    "verifier",
    "weights",
    "segment",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    for name in BENCHMARKS:
        p = sub.add_parser(name)
        p.set_defaults(_bench_module=f"t1.bench.{name}")
        try:
            importlib.import_module(f"t1.bench.{name}").add_arguments(p)
        except ModuleNotFoundError as e:
            if e.name != f"t1.bench.{name}":
                raise


def main(args: argparse.Namespace) -> int:
    module = importlib.import_module(args._bench_module)
    return int(module.main(args) or 0)
