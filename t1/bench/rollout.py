"""`t1 bench rollout`: the rollout side's costs, measured side by side in one run.

    t1 bench rollout [--json FILE] [--reps 5] [--threads 2] [--skip replay,tito]

Entries (issue 3, Benchmarks):
* capture   — generation with vs without routing capture (same prompts, same seeds, bf16,
              interleaved repetitions; target ratio <= 1.02).
* prefix    — a 20-turn trajectory with the per-session prefix cache vs re-prefilling the
              whole prompt every turn (identical prompts; target prefill time >= 5x lower);
              prefilled tokens and total wall time reported too.
* bytes     — routing bytes per token at (layers, k) = (48, 8) from the real record format
              (t1/model/routing.py: the compact array, and the `routing.npy` sidecar a trajectory
              record writes with it; target 384, SGLang's int32 1536).
* replay    — the replay check on a bf16 multi-turn rollout: expert choices reproduced under
              replay, |logp_train - logp_rollout| with and without replay, and the fraction of
              positions an fp32 full forward routes differently without replay (and, for
              comparison, a bf16 full forward: cached decode vs full sequence in one dtype).
* tito      — TITO assembly timing from `t1.tito.bench_assembly()` when that exists.

Timings depend on the machine's load: figures go to LOG.md with the command and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from t1.config import ModelConfig
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.model import routing as rt
from t1.model.policy import build_policy
from t1.records import write_json_atomic

VOCAB = 4096  # the tiny campaign's trained BPE size


def _engine(seed: int = 0, **kw) -> LocalEngine:
    return LocalEngine(build_policy(ModelConfig(), VOCAB, seed=seed), **kw)


def _ids(n: int, g: torch.Generator) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=g).tolist()


def bench_capture(reps: int, batch: int = 4, prompt: int = 64, new: int = 64) -> dict[str, Any]:
    """Generation time with capture on vs off: same work, paired runs in alternating order.

    The machine is shared, so each pair's ratio is taken and the median over pairs reported
    (wall and process CPU time), next to the ratio of the fastest runs.
    """
    on = _engine(prefix_cache=False, capture=True)
    off = _engine(prefix_cache=False, capture=False)
    g = torch.Generator().manual_seed(0)
    prompts = [_ids(prompt, g) for _ in range(batch)]

    def run(engine: LocalEngine) -> tuple[float, float]:
        reqs = [
            GenerateRequest(
                p, SamplingParams(max_new_tokens=new, seed=i), return_routing=engine.capture
            )
            for i, p in enumerate(prompts)
        ]
        wall, cpu = time.perf_counter(), time.process_time()
        out = engine.generate(reqs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert all(len(r.output_ids) == new for r in out)
        assert all((r.routing is not None) == engine.capture for r in out)
        return wall, cpu

    run(on), run(off)  # warm-up
    pairs = []
    for i in range(reps):
        if i % 2:
            b_, a_ = run(off), run(on)
        else:
            a_, b_ = run(on), run(off)
        pairs.append((a_, b_))
    out: dict[str, Any] = {
        "batch": batch,
        "prompt_tokens": prompt,
        "new_tokens": new,
        "pairs": reps,
    }
    for j, clock in enumerate(("wall", "cpu")):
        with_c = [a[j] for a, _ in pairs]
        without = [b[j] for _, b in pairs]
        out[clock] = {
            "with_capture_min_s": min(with_c),
            "without_capture_min_s": min(without),
            "ratio_of_mins": min(with_c) / min(without),
            "median_pair_ratio": statistics.median(
                a / b for a, b in zip(with_c, without, strict=True)
            ),
        }
    out["attributed"] = _attributed_capture_cost(on, batch, new, min(b[0] for _, b in pairs))
    out["target_ratio"] = 1.02
    return out


def _attributed_capture_cost(
    engine: LocalEngine, batch: int, new: int, base_s: float
) -> dict[str, Any]:
    """The capture's own cost, timed in isolation (a shared machine's load hardly moves it).

    Per gate call: a tap around a trivial forward vs the bare call. Per generation: one
    `collect` over the rows a generation leaves (prefills + decode steps, every layer).
    Ratio = 1 + (gate calls * per-call cost + collect) / fastest generation without capture.
    """

    class Gate(torch.nn.Module):
        def __init__(self, out) -> None:
            super().__init__()
            self.out = out
            self.top_k, self.num_experts = engine.k, engine.num_experts

        def forward(self, hidden):
            return self.out

    h = torch.zeros(batch, 8)
    gate = Gate((h, h, torch.zeros(batch, engine.k, dtype=torch.long)))
    n = 20_000

    def per_call() -> float:
        t = time.perf_counter()
        for _ in range(n):
            gate(h)
        return (time.perf_counter() - t) / n

    bare = min(per_call() for _ in range(3))
    tap = rt._Tap.of(gate)
    tap.sinks.append([])
    tapped = min(per_call() for _ in range(3))
    tap.sinks.clear()
    tap.release()
    forwards = batch + new - 1  # one prefill per request, then new - 1 batched decode steps
    calls = forwards * engine.layers

    cap = rt.RoutingCapture.__new__(rt.RoutingCapture)
    cap.enabled, cap.gates = True, []
    t_collect = []
    for _ in range(5):
        cap._rows = [
            [torch.zeros(batch, engine.k, dtype=torch.long) for _ in range(forwards)]
            for _ in range(engine.layers)
        ]
        t = time.perf_counter()
        cap.collect()
        t_collect.append(time.perf_counter() - t)
    cost = calls * max(tapped - bare, 0.0) + min(t_collect)
    return {
        "gate_calls": calls,
        "per_call_overhead_us": (tapped - bare) * 1e6,
        "collect_ms": min(t_collect) * 1e3,
        "ratio": 1 + cost / base_s,
    }


def bench_prefix(
    turns: int = 20, prompt: int = 256, obs: int = 48, new: int = 24
) -> dict[str, Any]:
    """20 turns, each prompt = previous prompt + output + observation: cache vs re-prefill."""
    g = torch.Generator().manual_seed(1)
    cached = _engine(prefix_cache=True)
    fresh = _engine(prefix_cache=False)
    ids, prompts = _ids(prompt, g), []
    t = time.perf_counter()
    for turn in range(turns):
        prompts.append(ids)
        sp = SamplingParams(max_new_tokens=new, seed=turn)
        res = cached.generate([GenerateRequest(ids, sp, session_id="bench")])[0]
        ids = ids + res.output_ids + _ids(obs, g)
    wall_cached = time.perf_counter() - t
    t = time.perf_counter()
    for turn, p in enumerate(prompts):
        fresh.generate([GenerateRequest(p, SamplingParams(max_new_tokens=new, seed=turn))])
    wall_fresh = time.perf_counter() - t
    c, f = cached.stats, fresh.stats
    return {
        "turns": turns,
        "final_prompt_tokens": len(prompts[-1]),
        "cached": {
            "prefilled_tokens": c["prefilled_tokens"],
            "prefill_s": c["prefill_s"],
            "wall_s": wall_cached,
        },
        "reprefill": {
            "prefilled_tokens": f["prefilled_tokens"],
            "prefill_s": f["prefill_s"],
            "wall_s": wall_fresh,
        },
        "prefill_speedup": f["prefill_s"] / c["prefill_s"],
        "wall_speedup": wall_fresh / wall_cached,
        "target_prefill_speedup": 5.0,
    }


def bench_bytes(
    layers: int = 48, k: int = 8, experts: int = 256, tokens: int = 33_000
) -> dict[str, Any]:
    """Bytes per token of a real compact record (33k tokens, the paper's trajectory length),
    written and read back as a trajectory record's routing sidecar."""
    from t1.agent.trajectory import Status, Trajectory, Turn, load_trajectory, save_trajectory

    ids = np.random.default_rng(0).integers(0, experts, size=(tokens, layers, k))
    record = rt.compact(ids, experts)
    turn = Turn(np.zeros(tokens, np.int32), [1], [0.0], routing=record, engine_ids=[1])
    with tempfile.TemporaryDirectory() as d:
        path = save_trajectory(Trajectory("bench", Status.COMPLETED, [turn]), Path(d) / "t")
        file_bytes = (path / "routing.npy").stat().st_size
        back = load_trajectory(path).turns[0].routing
    assert np.array_equal(back, ids)
    wire = len(rt.encode_sglang(record[:1000])) / 1000
    return {
        "layers": layers,
        "k": k,
        "experts": experts,
        "dtype": str(record.dtype),
        "bytes_per_token": record.nbytes / tokens,
        "file_bytes_per_token": file_bytes / tokens,
        "int32_bytes_per_token": layers * k * 4,
        "sglang_base64_chars_per_token": wire,
        "mib_per_33k_tokens": record.nbytes / 2**20,
        "target_bytes_per_token": 384,
    }


def bench_replay(turns: int = 5, new: int = 64) -> dict[str, Any]:
    """Replay check on a bf16 rollout (the acceptance test's measurement, larger)."""
    engine = _engine(dtype="bfloat16")
    trainer = build_policy(ModelConfig(), VOCAB, seed=0)  # the trainer's fp32 copy
    g = torch.Generator().manual_seed(2)
    ids = _ids(32, g)
    mask, logprobs, parts, start = [0] * 32, [0.0] * 32, [], 0
    for t in range(turns):
        sp = SamplingParams(temperature=1.0, max_new_tokens=new, seed=t)
        res = engine.generate([GenerateRequest(ids, sp, session_id="replay", routing_start=start)])[
            0
        ]
        parts.append(res.routing)
        start = len(ids) + len(res.output_ids) - 1
        ids, mask, logprobs = (
            ids + res.output_ids,
            mask + [1] * len(res.output_ids),
            logprobs + res.output_logprobs,
        )
        if t < turns - 1:
            ids, mask, logprobs = ids + _ids(16, g), mask + [0] * 16, logprobs + [0.0] * 16
    record = np.concatenate(parts)
    # the trainer's view (a TITO segment's routing): int16, -1 = placeholder at the last position
    r = torch.from_numpy(np.concatenate([record, record[:1]]).astype(np.int16))
    r[-1] = -1
    x = torch.tensor([ids])
    loss = np.array(mask, bool)
    out = {"positions": len(ids), "loss_tokens": int(loss.sum())}
    bf16 = build_policy(ModelConfig(), VOCAB, seed=0).to(torch.bfloat16)
    runs = (
        ("with_replay", trainer, r),
        ("without_replay", trainer, None),
        ("bf16_full_forward", bf16, None),
    )
    for name, model, replayed in runs:
        with (
            torch.no_grad(),
            rt.RoutingCapture(model, stage="live") as live,
            rt.RoutingCapture(model, stage="used") as used,
        ):
            if replayed is None:
                logits = model(x).logits
            else:
                with rt.replay(model, replayed[None]):
                    logits = model(x).logits
        lp = torch.log_softmax(logits[0].float(), -1)[:-1].gather(-1, x[0, 1:, None])[:, 0].numpy()
        gap = np.abs(lp - np.array(logprobs[1:]))[loss[1:]]
        # live: the gates' own choice (before any replay); used: what the experts were called
        # with (the engine's ids under replay: 0 differ while replay works)
        n_live, n = rt.mismatch(live.collect().numpy(), r.numpy())
        n_used, _ = rt.mismatch(used.collect().numpy(), r.numpy())
        out[name] = {
            "logprob_gap_mean": float(gap.mean()),
            "logprob_gap_max": float(gap.max()),
            "positions_routed_differently": n_live / n,  # live routing vs the engine's
            "positions_computed_differently": n_used / n,  # experts used vs the engine's
        }
    return out


def bench_tito() -> dict[str, Any]:
    try:
        from t1.tito import bench_assembly
    except ImportError as e:
        return {"skipped": f"t1.tito.bench_assembly is not available ({e})"}
    return bench_assembly()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--reps", type=int, default=12, help="repetitions of the capture A/B")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--skip", default="", help="comma-separated entries to skip")


def main(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    entries = {
        "capture": lambda: bench_capture(args.reps),
        "prefix": bench_prefix,
        "bytes": bench_bytes,
        "replay": bench_replay,
        "tito": bench_tito,
    }
    results: dict[str, Any] = {
        "schema_version": 1,
        "threads": args.threads,
        "torch": torch.__version__,
    }
    for name, fn in entries.items():
        if name in skip:
            results[name] = {"skipped": "--skip"}
            continue
        t, load = time.perf_counter(), os.getloadavg()[0]
        results[name] = fn()
        results[name]["bench_s"] = round(time.perf_counter() - t, 2)
        # The machine may be shared: the 1-minute load average before and after, for the log.
        results[name]["loadavg"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        write_json_atomic(args.json, results, indent=2)
    return 0
