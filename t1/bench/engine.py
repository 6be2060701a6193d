"""`t1 bench engine`: the local engine's deterministic rollout throughput, today's path vs lean.

    t1 bench engine [--config workflow/config/tiny.yaml] [--json FILE] [--trajectories 4]
                    [--turns 3] [--prompt 256] [--obs 24] [--new 40] [--reps 2] [--threads N]

The engines run with `run.deterministic` on, as a deterministic campaign builds them:
* hf_serial - today's path: the HF module path, one request at a time (what deterministic mode
  had to do while decode numerics depended on the batch), its worker thread at `run.threads`
  intra-op threads as the engine ran before `engine.threads`;
* lean      - the new path: t1/engine/lean.py (plain tensor code, per-request KV caches,
  batch-invariant decoding, so it batches up to `engine.max_batch` requests), its worker thread
  at `engine.threads`;
* hf_serial_engine_threads - the HF serial path at `engine.threads` too: what of the speedup
  is the thread setting alone (a 2-thread OpenMP team in the engine's worker thread triples the
  tiny MoE's per-op cost on 2 cores; in the main thread it does not).
Each runs rollout-like trajectories (a `--prompt`-token first prompt; `--turns` turns of
`--new` sampled tokens; each next prompt = prompt + output + `--obs` observation tokens, one
prefix-cache session per trajectory) from 1 worker thread and from the config's
`rollout.workers` threads, every worker running `--trajectories` trajectories in a row. Reported:
trajectories/min, generated tokens/s, wall and process CPU seconds (best of `--reps`), the
speedups, whether the lean outputs at batch N equal those at batch 1 bit for bit, and the
negative control behind the design: how many outputs of an fp32 / bf16 [1,128]x[128,256]
matmul differ from row 0 of the same product with M = 8 on this machine. Engine-side only: a
real rollout adds the sandbox's command time. Timings are never asserted in tests; figures go
to LOG.md with the command and the date.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import torch

from t1.config import load_config
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.model.policy import build_policy
from t1.records import write_json_atomic

VOCAB = 4096  # the tiny campaign's trained BPE size


def _trajectory(engine: LocalEngine, traj: int, args) -> tuple[list[int], int]:
    """One rollout-like trajectory; returns (all sampled ids, generated tokens)."""
    g = torch.Generator().manual_seed(traj)
    ids = torch.randint(0, VOCAB, (args.prompt,), generator=g).tolist()
    session, sampled = f"bench-{traj}", []
    for turn in range(args.turns):
        sp = SamplingParams(temperature=1.0, max_new_tokens=args.new, seed=traj * 1000 + turn)
        res = engine.generate([GenerateRequest(ids, sp, session_id=session)])[0]
        sampled += res.output_ids
        ids = ids + res.output_ids + torch.randint(0, VOCAB, (args.obs,), generator=g).tolist()
    engine.close_session(session)
    return sampled, len(sampled)


def _run(engine: LocalEngine, workers: int, args) -> dict[str, Any]:
    outputs: dict[int, list[int]] = {}
    tokens = [0] * workers

    def worker(w: int) -> None:
        for i in range(args.trajectories):
            traj = w * args.trajectories + i
            outputs[traj], n = _trajectory(engine, traj, args)
            tokens[w] += n

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    steps0 = engine.stats["decode_steps"]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n_traj = workers * args.trajectories
    return {
        "workers": workers,
        "trajectories": n_traj,
        "generated_tokens": sum(tokens),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "trajectories_per_min": round(60 * n_traj / wall, 2),
        "tokens_per_s": round(sum(tokens) / wall, 1),
        "decode_steps": engine.stats["decode_steps"] - steps0,
        "outputs": outputs,
    }


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    best["wall_s_all"] = [r["wall_s"] for r in runs]
    best["same_outputs_every_rep"] = all(r["outputs"] == runs[0]["outputs"] for r in runs)
    return best


def matmul_control() -> dict[str, Any]:
    """Outputs of x[:1] @ W.T differing from row 0 of x[:8] @ W.T (the BLAS picks by shape)."""
    out = {}
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 128, generator=g), torch.randn(256, 128, generator=g) * 0.05
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = x.to(dt), w.to(dt)
        out[name] = int(((a[:1] @ b.T)[0] != (a @ b.T)[0]).sum())
    out["of"] = 256
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="workflow/config/tiny.yaml")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--trajectories", type=int, default=4, help="per worker")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=256, help="first prompt's tokens")
    parser.add_argument("--obs", type=int, default=24, help="observation tokens per turn")
    parser.add_argument("--new", type=int, default=40, help="sampled tokens per turn")
    parser.add_argument("--reps", type=int, default=2, help="repetitions (best wall kept)")
    parser.add_argument("--threads", type=int, help="torch threads (default: run.threads)")


def main(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    threads = args.threads or cfg.run.threads
    torch.set_num_threads(threads)
    workers = cfg.rollout.workers
    policy = build_policy(cfg.model, VOCAB, seed=cfg.run.seed)
    e = cfg.engine
    fixed = e.threads or cfg.run.threads

    def engine(**kw) -> LocalEngine:
        return LocalEngine(copy.deepcopy(policy), dtype=e.dtype, **kw)

    engines = {  # what LocalEngine.from_config builds in deterministic mode, before and now
        "hf_serial": engine(lean=False, max_batch=1, threads=threads),
        "lean": engine(max_batch=e.max_batch, threads=fixed),
        "hf_serial_engine_threads": engine(lean=False, max_batch=1, threads=fixed),
    }
    assert engines["lean"].batch_invariant_decoding
    load = os.getloadavg()[0]
    results: dict[str, Any] = {
        "schema_version": 2,
        "config": args.config,
        "threads": threads,
        "engine_threads": fixed,
        "dtype": e.dtype,
        "torch": torch.__version__,
        "workload": {
            k: getattr(args, k) for k in ("trajectories", "turns", "prompt", "obs", "new")
        },
        "matmul_control_differing_outputs": matmul_control(),
    }
    for engine in engines.values():
        _run(engine, 1, argparse.Namespace(**{**vars(args), "trajectories": 1}))  # warm-up
    settings = (("batch_1", 1), (f"batch_{workers}", workers))
    runs: dict[tuple[str, str], list] = {}
    for _ in range(args.reps):  # interleaved: a shared machine's load hits both sides alike
        for label, n in settings:
            for name, engine in engines.items():
                runs.setdefault((name, label), []).append(_run(engine, n, args))
    for (name, label), rs in runs.items():
        results.setdefault(name, {})[label] = _best(rs)
    lean, hf, hf_fixed = (results[k] for k in ("lean", "hf_serial", "hf_serial_engine_threads"))
    n_key = f"batch_{workers}"
    results["median_pair_speedup"] = {
        label: round(
            statistics.median(
                h["wall_s"] / x["wall_s"]
                for h, x in zip(runs[("hf_serial", label)], runs[("lean", label)], strict=True)
            ),
            2,
        )
        for label, _ in settings
    }
    results["lean_batch_n_equals_batch_1"] = all(
        lean[n_key]["outputs"].get(t) == o for t, o in lean["batch_1"]["outputs"].items()
    )
    for side in (lean, hf, hf_fixed):
        for r in side.values():
            r.pop("outputs")
    results["speedup_trajectories_per_min"] = {
        k: round(lean[k]["trajectories_per_min"] / hf[k]["trajectories_per_min"], 2)
        for k in ("batch_1", n_key)
    }
    results["speedup_vs_hf_serial_engine_threads"] = {
        k: round(lean[k]["trajectories_per_min"] / hf_fixed[k]["trajectories_per_min"], 2)
        for k in ("batch_1", n_key)
    }
    results["target_speedup"] = 4.0
    results["loadavg"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        write_json_atomic(args.json, results, indent=2)
    return 0
