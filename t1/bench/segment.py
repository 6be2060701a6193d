"""`t1 bench segment`: PPO steps with their commands forked from a warm driver against started
afresh (`campaign.warm_start`, t1/run/warm_start.py), side by side on one finished run.

    t1 bench segment --run-dir results/tiny [--steps 4] [--repeat 1] [--json FILE]

Each arm runs `t1 segment --iter 0 --steps K` from the run's SFT actor and warm critic, on its
train pool with its tokenizer, into a scratch run directory of its own (the run's inputs are
read in place, never written), with a copy of the run's pinned config in which only
`campaign.warm_start` differs; the arms alternate, warm first. Prints one JSON object: seconds
per step of each arm (median over --repeat), cold / warm, and whether the arms' step K-1
actors are bit-identical - they must be: the option changes how a command starts, never what
it computes. The figures go into LOG.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from t1.run.steps import step_dir, t1_command
from t1.store.ckpt import sha256_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, type=Path, help="a finished run (RESULTS/RUN)")
    parser.add_argument("--steps", type=int, default=4, help="PPO steps per arm")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each arm (alternating)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def _inputs(run: Path) -> dict[str, Path]:
    need = {
        "config": run / "config.yaml",
        "pool": run / "pool" / "train",
        "sft": run / "sft" / "model",
        "critic": run / "critic" / "warmup",
        "tokenizer": run / "tokenizer",
    }
    missing = [str(p) for p in need.values() if not p.exists()]
    if missing:
        raise SystemExit(f"t1 bench segment: {run}: not a finished run, missing {missing}")
    return need


def run_arm(inputs: dict[str, Path], scratch: Path, warm: bool, steps: int) -> dict[str, Any]:
    """One `t1 segment` of `steps` steps in a fresh `scratch` dir; seconds and the last actor."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    cfg = yaml.safe_load(inputs["config"].read_text())
    cfg.setdefault("campaign", {})["warm_start"] = warm
    config = scratch / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [*t1_command(), "segment", "--config", str(config), "--iter", "0"]
    cmd += ["--steps", str(steps), "--run-dir", str(scratch), "--pool", str(inputs["pool"])]
    cmd += ["--from", str(inputs["sft"]), "--critic", str(inputs["critic"])]
    cmd += ["--tokenizer", str(inputs["tokenizer"]), "--out", str(scratch / "DONE")]
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.monotonic() - t0
    if r.returncode:
        raise SystemExit(
            f"t1 bench segment: the {'warm' if warm else 'cold'} arm failed "
            f"(exit {r.returncode}): {r.stdout[-3000:]}"
        )
    actor = step_dir(scratch, steps - 1) / "train" / "actor" / "model.safetensors"
    return {"seconds": seconds, "actor_sha256": sha256_file(actor)}


def main(args: argparse.Namespace) -> int:
    inputs = _inputs(args.run_dir)
    if args.steps < 1 or args.repeat < 1:
        raise SystemExit("t1 bench segment: --steps and --repeat must be >= 1")
    root = Path(tempfile.mkdtemp(prefix="t1-bench-segment-", dir=args.dir))
    arms: dict[str, list[dict[str, Any]]] = {"warm": [], "cold": []}
    try:
        for _ in range(args.repeat):
            for name in ("warm", "cold"):
                arms[name].append(run_arm(inputs, root / name, name == "warm", args.steps))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    per_step = {
        name: statistics.median(r["seconds"] for r in runs) / args.steps
        for name, runs in arms.items()
    }
    hashes = {r["actor_sha256"] for runs in arms.values() for r in runs}
    out = {
        "run_dir": str(args.run_dir),
        "steps": args.steps,
        "repeat": args.repeat,
        "seconds_per_step": {k: round(v, 2) for k, v in per_step.items()},
        "cold_over_warm": round(per_step["cold"] / per_step["warm"], 3),
        "runs": arms,
        "actors_identical": len(hashes) == 1,
        "actor_sha256": sorted(hashes),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0 if out["actors_identical"] else 1
