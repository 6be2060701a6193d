"""`t1 bench weights`: a step's weights into the rollout replicas, from disk vs over a process group.

    t1 bench weights [--config workflow/config/tiny.yaml] [--replicas 2] [--bucket-mb 1]
                     [--reps 3] [--json FILE]

Starts `--replicas` real `t1 serve` replicas (the config's engine dtype, on the config's tiny
MoE) and moves perturbed weights into all of them each rep, both ways, interleaved:
* disk        - the trainer writes the HF export (save_policy: config.json + safetensors) and
  every replica loads it with `/update_weights_from_disk` (t1/engine/fleet.py today);
* distributed - t1/engine/weight_update.py: rank 0 of a gloo group with the replicas,
  `/update_weights_from_distributed` per bucket of at most `--bucket-mb` with the broadcast
  (open and close of the group timed apart: a trainer may keep it open across steps).
Reported per way: seconds (best of `--reps`, every rep listed), bytes moved (disk: written once
+ read by each replica; distributed: the payload broadcast to each replica), the sender's
peak bucket, and the peak extra resident memory of the sender and of each replica during the
move (Linux VmHWM after resetting it through /proc/PID/clear_refs, minus VmRSS before; 0 where
/proc does not allow it), whether every replica then holds the sender's tensors bit for bit
(per-tensor sha256 over `/weights_checksum`), and the ratio distributed / disk of the seconds.
Tensors are sent in the replicas' dtype (a bf16 trainer's HF tensors are bf16). Timings are
never asserted in tests; figures go to LOG.md with the command and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from t1.config import load_config
from t1.engine.weight_update import WeightUpdateGroup, tensor_checksum
from t1.model.policy import build_policy, save_policy, torch_dtype
from t1.records import write_json_atomic

VOCAB = 4096  # the tiny campaign's trained BPE size


def _status(pid: int | str) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes ({} where /proc cannot say)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


class _Peak:
    """Peak extra resident memory of processes over a `with` block (VmHWM reset first)."""

    def __init__(self, pids: dict[str, int | str]) -> None:
        self.pids, self.base, self.extra = pids, {}, {}

    def __enter__(self) -> _Peak:
        for name, pid in self.pids.items():
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to VmRSS
            except OSError:
                continue
            self.base[name] = _status(pid).get("VmRSS", 0)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, pid in self.pids.items():
            if name in self.base:
                self.extra[name] = max(0, _status(pid).get("VmHWM", 0) - self.base[name])


def _serve(config: str, model: Path) -> tuple[subprocess.Popen, str, int]:
    cmd = [sys.executable, "-m", "t1.cli", "serve", "--config", config, "--model", str(model)]
    proc = subprocess.Popen(
        [*cmd, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"t1 serve --config {config} --model {model} did not start")
    info = json.loads(line)
    return proc, info["url"], info["pid"]


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def _holds(urls: list[str], state: dict[str, torch.Tensor]) -> bool:
    """Every replica's tensors equal `state` bit for bit (and no tensor is missing)."""
    want = {n: tensor_checksum(t) for n, t in state.items()}
    for url in urls:
        with urllib.request.urlopen(url + "/weights_checksum", timeout=60) as r:
            if json.loads(r.read())["tensors"] != want:
                return False
    return True


def _disk(model, state, urls, pids, root: Path, step: int) -> dict[str, Any]:
    model.load_state_dict(state)
    out = root / f"step_{step:03d}"
    with _Peak(pids) as peak:
        t0 = time.perf_counter()
        save_policy(model, out)
        t1 = time.perf_counter()
        body = {"model_path": str(out), "weight_version": f"disk-{step}", "flush_cache": True}
        with ThreadPoolExecutor(len(urls)) as pool:
            answers = list(pool.map(lambda u: _post(u + "/update_weights_from_disk", body), urls))
        t2 = time.perf_counter()
    if not all(a.get("success") for a in answers):
        raise RuntimeError(f"update_weights_from_disk failed: {answers}")
    size = sum(f.stat().st_size for f in out.iterdir())
    return {
        "seconds": round(t2 - t0, 4),
        "write_s": round(t1 - t0, 4),
        "load_s": round(t2 - t1, 4),
        "bytes_written": size,
        "bytes_moved": size * (1 + len(urls)),
        "peak_extra_bytes": peak.extra,
        "replicas_hold_the_weights": _holds(urls, state),
    }


def _distributed(state, urls, pids, bucket_bytes: int, step: int) -> dict[str, Any]:
    with _Peak(pids) as peak:
        t0 = time.perf_counter()
        group = WeightUpdateGroup(urls, timeout_s=600).open()
        t1 = time.perf_counter()
        record = group.send(state.items(), f"distributed-{step}", bucket_bytes)
        t2 = time.perf_counter()
        group.close()
        t3 = time.perf_counter()
    return {
        "seconds": round(t2 - t1, 4),
        "open_s": round(t1 - t0, 4),
        "close_s": round(t3 - t2, 4),
        **{k: v for k, v in record.to_json().items() if k not in ("seconds", "version")},
        "peak_extra_bytes": peak.extra,
        "replicas_hold_the_weights": _holds(urls, state),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="workflow/config/tiny.yaml")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="distributed bucket size")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (best seconds kept)")
    parser.add_argument("--json", type=Path, help="also write the results here")


def main(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    torch.set_num_threads(cfg.run.threads)
    dtype = torch_dtype(cfg.engine.dtype)
    model = build_policy(cfg.model, VOCAB, seed=cfg.run.seed).to(dtype)
    base = {n: t.clone() for n, t in model.state_dict().items()}
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="t1-bench-weights-") as tmp:
        root = Path(tmp)
        save_policy(model, root / "init")
        try:
            for _ in range(args.replicas):
                procs.append(_serve(args.config, root / "init"))
            urls = [u for _, u, _ in procs]
            pids = {"sender": os.getpid(), **{u: pid for _, u, pid in procs}}
            runs: dict[str, list[dict[str, Any]]] = {"disk": [], "distributed": []}
            for rep in range(args.reps):  # interleaved: a shared machine's load hits both alike
                g = torch.Generator().manual_seed(rep + 1)
                state = {
                    n: (t.float() + 0.01 * torch.randn(t.shape, generator=g)).to(dtype)
                    for n, t in base.items()
                }
                runs["disk"].append(_disk(model, state, urls, pids, root, rep))
                bucket = int(args.bucket_mb * (1 << 20))
                runs["distributed"].append(_distributed(state, urls, pids, bucket, rep))
        finally:
            for proc, _, _ in procs:
                proc.terminate()
                proc.wait(timeout=30)
    payload = sum(t.numel() * t.element_size() for t in base.values())
    results: dict[str, Any] = {
        "schema_version": 1,
        "config": args.config,
        "dtype": cfg.engine.dtype,
        "replicas": args.replicas,
        "tensors": len(base),
        "payload_bytes": payload,
        "bucket_mb": args.bucket_mb,
        "torch": torch.__version__,
    }
    for way, rs in runs.items():
        best = dict(min(rs, key=lambda r: r["seconds"]))
        best["seconds_all"] = [r["seconds"] for r in rs]
        best["replicas_hold_the_weights"] = all(r["replicas_hold_the_weights"] for r in rs)
        results[way] = best
    results["ratio_distributed_over_disk_s"] = round(
        results["distributed"]["seconds"] / results["disk"]["seconds"], 3
    )
    print(json.dumps(results, indent=2))
    if args.json:
        write_json_atomic(args.json, results, indent=2)
    ok = all(results[w]["replicas_hold_the_weights"] for w in runs)
    return 0 if ok else 1
