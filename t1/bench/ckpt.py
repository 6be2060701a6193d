"""`t1 bench ckpt`: checkpoint write throughput against `dd`, resume time, Slurm segment overhead.

    t1 bench ckpt [--mb 512] [--dir DIR] [--repeat 3] [--slurm-segments 3] [--json FILE]

1. Write: a checkpoint of --mb MiB (half an actor state dict -> safetensors, half an AdamW
   state -> torch.save, plus the small JSON parts) with `t1.store.ckpt_write.write_checkpoint` (temp dir,
   fsync, rename, manifest with sha256, marker), against `dd bs=8M conv=fsync` of the same
   number of bytes into the same directory, alternating, --repeat times each; medians and the
   ratio (target >= 0.5).
2. Resume: `latest_complete` (sha256 verification of every part, then `size` only) + loading
   every part, on the newest of those checkpoints.
3. Segments on the local Slurm (skipped when `sinfo` shows no usable node): the chain workflow
   of tests/workflow/chain (a supervisor + a one-step toy per segment) through profiles/slurm-ci,
   --slurm-segments segments; wall seconds per segment, and from sacct the queue wait
   (Start - Submit) and job time; beside it one `sbatch --wait --wrap true` round trip.

Prints one JSON object (and writes it to --json); the figures go into LOG.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb", type=int, default=512, help="checkpoint size in MiB")
    parser.add_argument(
        "--dir", default=None, help="where to write (default: a temp dir in the cwd)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slurm-segments", type=int, default=3, help="0 skips the Slurm part")
    parser.add_argument("--json", default=None, help="also write the result here")


def _parts(mb: int) -> dict[str, Any]:
    import torch

    n = mb * (1 << 20) // 4 // 2  # float32 elements per half
    side = 4096
    g = torch.Generator().manual_seed(0)
    actor = {f"layers.{i}.weight": torch.randn(side, n // side // 8, generator=g) for i in range(8)}
    optim = {
        "state": {
            i: {
                "exp_avg": torch.randn(n // 16, generator=g),
                "exp_avg_sq": torch.rand(n // 16, generator=g),
            }
            for i in range(8)
        },
        "param_groups": [{"lr": 1e-6, "betas": (0.9, 0.98), "params": list(range(8))}],
    }
    return {
        "actor": actor,
        "actor_optim": optim,
        "data": {"cursor": 17, "epoch": 2, "perm_seed": 1234},
        "counters": {"step": 3},
        "metrics": [{"step": i, "reward": 0.1 * i} for i in range(100)],
    }


def _dd(path: Path, nbytes: int) -> float:
    count = max(1, nbytes // (8 << 20))
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={path}", "bs=8M", f"count={count}", "conv=fsync"],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - t0
    path.unlink()
    return count * (8 << 20) / seconds / 1e6


def bench_write_and_resume(root: Path, mb: int, repeat: int) -> dict[str, Any]:
    from t1.store.ckpt import latest_complete
    from t1.store.ckpt_write import write_checkpoint

    parts = _parts(mb)
    ckpt_mbs, dd_mbs = [], []
    nbytes = 0
    for i in range(repeat):
        t0 = time.perf_counter()
        ck = write_checkpoint(root / "ckpt", i, parts)
        seconds = time.perf_counter() - t0
        nbytes = sum(p["bytes"] for p in ck.manifest["parts"].values())
        ckpt_mbs.append(nbytes / seconds / 1e6)
        dd_mbs.append(_dd(root / "dd.bin", nbytes))
    out: dict[str, Any] = {
        "bytes": nbytes,
        "ckpt_write_MBps": round(statistics.median(ckpt_mbs), 1),
        "dd_write_MBps": round(statistics.median(dd_mbs), 1),
        "ratio": round(statistics.median(ckpt_mbs) / statistics.median(dd_mbs), 3),
        "ckpt_runs_MBps": [round(x, 1) for x in ckpt_mbs],
        "dd_runs_MBps": [round(x, 1) for x in dd_mbs],
    }
    for verify in ("sha256", "size"):
        t0 = time.perf_counter()
        ck = latest_complete(root / "ckpt", verify=verify)
        t1_ = time.perf_counter()
        ck.load_all()
        t2 = time.perf_counter()
        out[f"resume_{verify}_s"] = {
            "find_and_verify": round(t1_ - t0, 3),
            "load": round(t2 - t1_, 3),
            "total": round(t2 - t0, 3),
        }
    return out


def _slurm_up() -> bool:
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(s in r.stdout for s in ("idle", "mixed"))


def _sacct_times(job: str) -> tuple[float, float]:
    """(Start - Submit, End - Start) of the job's last run, seconds."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job, "-o", "Submit,Start,End"],
        capture_output=True,
        text=True,
    ).stdout.split()
    from datetime import datetime

    submit, start, end = (datetime.fromisoformat(x).timestamp() for x in out[-1].split("|"))
    return start - submit, end - start


def bench_slurm(segments: int) -> dict[str, Any]:
    if segments <= 0:
        return {"skipped": "--slurm-segments 0"}
    if not _slurm_up():
        return {"skipped": "no local Slurm (bash .ci/slurm/up.sh)"}
    t0 = time.perf_counter()
    subprocess.run(
        ["sbatch", "--wait", "--wrap", "true", "-o", "/dev/null"], check=True, capture_output=True
    )
    sbatch_wait = time.perf_counter() - t0
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory(dir=".") as d:
        cmd = [
            str(bin_dir / "snakemake"),
            "-s",
            str(REPO / "tests/workflow/chain/Snakefile"),
            "-d",
            d,
        ]
        cmd += [
            "--profile",
            str(REPO / "profiles/slurm-ci"),
            "--config",
            f"segments={segments}",
            "steps=1",
            "step_s=0.01",
        ]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode:
            return {"error": r.stdout[-2000:] + r.stderr[-2000:]}
        jobs = [
            line.split("SLURM jobid ")[1].split()[0]
            for line in r.stdout.splitlines() + r.stderr.splitlines()
            if "SLURM jobid" in line
        ]
    waits, runs = zip(*(_sacct_times(j) for j in jobs), strict=True)
    return {
        "segments": segments,
        "wall_s": round(wall, 1),
        "per_segment_s": round(wall / segments, 1),
        "queue_wait_s": round(statistics.mean(waits), 1),
        "job_s": round(statistics.mean(runs), 1),
        "sbatch_wait_true_s": round(sbatch_wait, 1),
    }


def main(args: argparse.Namespace) -> int:
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="t1-bench-ckpt-", dir="."))
    base.mkdir(parents=True, exist_ok=True)
    try:
        result = {"checkpoint": bench_write_and_resume(base, args.mb, args.repeat)}
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    result["slurm"] = bench_slurm(args.slurm_segments)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
