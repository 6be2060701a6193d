"""`t1 bench train`: the tiny model's training step on this machine, measured side by side.

    t1 bench train [--config FILE] [--rows 4] [--seq 512] [--repeats 5] [--loss-fraction 0.35]
                   [--skip replay|throughput|loss_region|picked_logp|length_groups|memory]
                   [--json FILE]

Prints one JSON object:
* replay: median seconds (wall and process CPU) of an actor update (forward + backward +
  AdamW) on the same batch with R³ replay vs without (routing record ignored), alternating
  which goes first, and their ratios (target <= 1.05; on a shared machine the CPU-time ratio
  is the steadier one);
* throughput: training tokens/s of a full critic-first PPO step (critic update + actor
  update + the no-grad forwards) and of an actor update alone;
* loss_region: median seconds of an actor update (AdamW, same batch, alternating which goes
  first) with the output layer on every position (the full logits) vs on the loss positions
  only (t1.train.hf.loss_region_logp), at `--loss-fraction` of each row in the loss region
  (a pre-training row of the tiny config: about a third), and their ratio;
* picked_logp: median seconds of an actor update through the loss region (AdamW, same batch,
  alternating which goes first) with t1.train.hf.picked_logp (one in-place pass backward) vs
  autograd's `gather - logsumexp`, their ratio, and whether one update from the same weights
  leaves the same weights to the bit by either path (`bit_identical`);
* length_groups: median seconds of an actor update (AdamW, alternating which goes first) on
  rows of lengths spread evenly from a quarter of `--seq` to `--seq`, run whole (every row
  padded to the longest) vs in the trainer's length groups (t1.train.batch.length_groups), their
  ratio, the batch's padding share, the groups' sizes, and the largest difference between the
  two paths' log-probs from the same weights (fp32 rounding: the groups' matmuls have other
  shapes);
* memory: peak resident memory of one actor and one critic training step (fresh child
  process, glibc asked to return large blocks at once: MALLOC_MMAP_THRESHOLD_=65536;
  peak RSS (VmHWM, reset just before the model is built) over two steps minus the RSS at
  that point) against the planner's
  prediction (`t1.model.memory`, framework hf) at the same rows x seq, and their ratio.
Threads: `run.threads` of the config (2 by default). Timings belong in LOG.md, not in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from t1.config import Config, load_config


def _cfg(path: str | None) -> Config:
    return load_config(path) if path else Config()


def synthetic_batch(actor, vocab: int, rows: int, seq: int, seed: int = 0, loss: float = 0.5):
    """Rows of random ids, loss on the last `loss` of each row, routing recorded from `actor`
    itself."""
    from t1.model.routing import RoutingCapture
    from t1.train.batch import Row, collate

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, seq), generator=g)
    with torch.no_grad(), RoutingCapture(actor) as cap:
        actor(input_ids=ids, use_cache=False)
    routing = cap.collect().view(rows, seq, -1, actor.config.num_experts_per_tok).to(torch.int16)
    context = seq - max(1, round(seq * loss))
    mask = [0] * context + [1] * (seq - context)
    out = [
        Row(
            ids=ids[i].tolist(),
            loss_mask=mask,
            logprobs=None,
            routing=routing[i],
            reward=float(i % 2),
            meta={"resolved": bool(i % 2)},
        )
        for i in range(rows)
    ]
    return collate(out)


def _trainer(cfg: Config, vocab: int, actor: bool = True, critic: bool = True):
    from t1.model.policy import Critic, build_policy
    from t1.train.hf import HFTrainer

    policy = build_policy(cfg.model, vocab, seed=cfg.run.seed)
    crit = Critic.from_policy(policy, seed=cfg.run.seed + 1) if critic else None
    p = cfg.ppo
    return HFTrainer(
        policy if actor else None,
        crit,
        actor_lr=p.actor_lr,
        critic_lr=p.critic_lr,
        betas=tuple(p.betas),
        weight_decay=p.weight_decay,
        max_grad_norm=p.max_grad_norm,
        replay=True,
        seed=cfg.run.seed,
    ), policy


def _nll(logp, b):
    return -(logp * b.loss_mask).sum() / b.loss_mask.sum(), {}


def bench_replay(cfg: Config, rows: int, seq: int, repeats: int) -> dict[str, Any]:
    vocab = cfg.tokenizer.vocab_size
    trainer, policy = _trainer(cfg, vocab, critic=False)
    batch = synthetic_batch(policy, vocab, rows, seq)
    plain = dataclasses.replace(batch, routing=None)
    trainer.actor_update(batch, _nll)  # warm-up (allocates the optimizer state)
    trainer.actor_update(plain, _nll)
    times: dict[str, list[float]] = {"replay": [], "live": []}
    cpu: dict[str, list[float]] = {"replay": [], "live": []}
    for i in range(repeats):
        order = (
            (("replay", batch), ("live", plain))
            if i % 2 == 0
            else (("live", plain), ("replay", batch))
        )
        for name, b in order:
            t0, c0 = time.perf_counter(), time.process_time()
            trainer.actor_update(b, _nll)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "rows": rows,
        "seq": seq,
        "replay_s": med["replay"],
        "live_s": med["live"],
        "ratio": med["replay"] / med["live"],
        "replay_cpu_s": med_cpu["replay"],
        "live_cpu_s": med_cpu["live"],
        "cpu_ratio": med_cpu["replay"] / med_cpu["live"],
        # Adjacent runs share the machine's load: the median of per-pair ratios is the
        # steadiest figure on a busy machine.
        "pair_ratio_median": statistics.median(
            r / x for r, x in zip(times["replay"], times["live"], strict=True)
        ),
        "target_ratio": 1.05,
        "samples": times,
    }


def bench_throughput(cfg: Config, rows: int, seq: int, repeats: int) -> dict[str, Any]:
    from t1.train.step import ppo_step

    vocab = cfg.tokenizer.vocab_size
    trainer, policy = _trainer(cfg, vocab)
    batch = synthetic_batch(policy, vocab, rows, seq)
    ppo = dataclasses.replace(cfg.ppo, minibatch=rows, epochs=1)
    ppo_step(trainer, batch, ppo)  # warm-up
    steps, updates, cpu = [], [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        ppo_step(trainer, batch, ppo)
        steps.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        t0 = time.perf_counter()
        trainer.actor_update(batch, _nll)
        updates.append(time.perf_counter() - t0)
    tokens = batch.tokens
    return {
        "ppo_step_cpu_s": statistics.median(cpu),
        "rows": rows,
        "seq": seq,
        "tokens": tokens,
        "ppo_step_s": statistics.median(steps),
        "ppo_step_tokens_per_s": tokens / statistics.median(steps),
        "actor_update_s": statistics.median(updates),
        "actor_update_tokens_per_s": tokens / statistics.median(updates),
    }


def _paired_updates(trainer, batch, names: tuple[str, str], arm, repeats: int) -> dict:
    """Seconds of actor updates on one batch, two arms alternating which goes first, `repeats`
    pairs after a first pair that warms up (and allocates the optimizer state). `arm(name)` is
    a context manager that sets its arm up around the update."""
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats + 1):
        for name in names if i % 2 == 0 else names[::-1]:
            with arm(name):
                t0 = time.perf_counter()
                trainer.actor_update(batch, _nll)
            if i > 0:
                times[name].append(time.perf_counter() - t0)
    return times


def _paired_figures(times: dict[str, list[float]]) -> dict[str, Any]:
    """{A}_s and {B}_s (medians), speedup A/B, the median of the pairs' ratios, the samples."""
    (a, ta), (b, tb) = times.items()
    return {
        f"{a}_s": statistics.median(ta),
        f"{b}_s": statistics.median(tb),
        "speedup": statistics.median(ta) / statistics.median(tb),
        "pair_speedup_median": statistics.median(x / y for x, y in zip(ta, tb, strict=True)),
        "samples": times,
    }


def bench_loss_region(
    cfg: Config, rows: int, seq: int, repeats: int, loss: float
) -> dict[str, Any]:
    """An actor update through the full logits vs through the loss positions' only."""
    vocab = cfg.tokenizer.vocab_size
    trainer, policy = _trainer(cfg, vocab, critic=False)
    batch = synthetic_batch(policy, vocab, rows, seq, loss=loss)

    @contextlib.contextmanager
    def region(name: str):
        trainer.loss_region = name == "loss_region"
        yield

    times = _paired_updates(trainer, batch, ("full", "loss_region"), region, repeats)
    return {"rows": rows, "seq": seq, "loss_fraction": loss, **_paired_figures(times)}


@contextlib.contextmanager
def _pick(name: str):
    """The loss region's log-softmax pick: "picked" (t1.train.hf.picked_logp) or "autograd"."""
    import t1.train.hf as hf

    fused = hf.picked_logp
    hf.picked_logp = fused if name == "picked" else hf.autograd_picked_logp
    try:
        yield
    finally:
        hf.picked_logp = fused


def bench_picked_logp(
    cfg: Config, rows: int, seq: int, repeats: int, loss: float
) -> dict[str, Any]:
    """An actor update through the loss region: picked_logp vs autograd's pick, side by side,
    and the weights one update from the same start leaves by each (equal to the bit?)."""
    vocab = cfg.tokenizer.vocab_size
    after = {}
    for name in ("autograd", "picked"):
        trainer, policy = _trainer(cfg, vocab, critic=False)  # the same seeded weights
        batch = synthetic_batch(policy, vocab, rows, seq, loss=loss)
        with _pick(name):
            trainer.actor_update(batch, _nll)
        after[name] = [p.detach().clone() for p in policy.parameters()]
    same = all(torch.equal(a, b) for a, b in zip(after["autograd"], after["picked"], strict=True))
    times = _paired_updates(trainer, batch, ("autograd", "picked"), _pick, repeats)
    figures = _paired_figures(times)
    return {"rows": rows, "seq": seq, "loss_fraction": loss, **figures, "bit_identical": same}


def varied_batch(actor, vocab: int, rows: int, seq: int, loss: float, shortest: float = 0.25):
    """synthetic_batch's rows cut to lengths spread evenly from `shortest` x seq to seq, each
    with the loss on its own last `loss`."""
    from t1.train.batch import Row, collate

    full = synthetic_batch(actor, vocab, rows, seq, loss=loss)
    out = []
    for i in range(rows):
        n = seq if rows == 1 else round(seq * (shortest + (1 - shortest) * i / (rows - 1)))
        context = n - max(1, round(n * loss))
        out.append(
            Row(
                ids=full.input_ids[i, :n].tolist(),
                loss_mask=[0] * context + [1] * (n - context),
                routing=full.routing[i, :n],
                reward=float(i % 2),
            )
        )
    return collate(out)


def bench_length_groups(
    cfg: Config, rows: int, seq: int, repeats: int, loss: float
) -> dict[str, Any]:
    """An actor update on rows of varied length, whole vs in length groups, side by side."""
    from t1.train.batch import length_groups
    from t1.train.hf import GROUP_OVERHEAD

    vocab = cfg.tokenizer.vocab_size
    trainer, policy = _trainer(cfg, vocab, critic=False)
    batch = varied_batch(policy, vocab, rows, seq, loss)
    overhead = {"whole": 1 << 30, "grouped": GROUP_OVERHEAD}

    @contextlib.contextmanager
    def grouping(name: str):
        trainer.group_overhead = overhead[name]
        yield

    logp = {}
    with torch.no_grad():
        for name in overhead:
            with grouping(name):
                logp[name] = trainer._actor_loss_logp(batch)
    times = _paired_updates(trainer, batch, ("whole", "grouped"), grouping, repeats)
    groups = length_groups(batch.lengths.tolist(), GROUP_OVERHEAD)
    return {
        "rows": rows,
        "seq": seq,
        "loss_fraction": loss,
        "lengths": batch.lengths.tolist(),
        "padding_share": 1 - batch.tokens / batch.input_ids.numel(),
        "group_overhead": GROUP_OVERHEAD,
        "groups": [len(g) for g in groups],
        "logp_max_abs_diff": float((logp["whole"] - logp["grouped"]).abs().max()),
        **_paired_figures(times),
    }


# ---------------------------------------------------------------- memory (child process)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    """VmHWM of this process's address space (reset by `_reset_peak`). Unlike ru_maxrss it
    does not carry over the parent's peak across fork + exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> None:
    """Set the peak RSS to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _memory_child(config: str | None, role: str, rows: int, seq: int) -> None:
    cfg = _cfg(config)
    torch.set_num_threads(cfg.run.threads)
    vocab = cfg.tokenizer.vocab_size
    # Warm imports and kernels on a throwaway model so the baseline holds them.
    small = dataclasses.replace(
        cfg,
        model=dataclasses.replace(
            cfg.model, layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, expert_intermediate=16
        ),
    )
    warm, wp = _trainer(small, 64)
    wb = synthetic_batch(wp, 64, 1, 16)
    warm.actor_update(wb, _nll)
    warm.critic_update(wb, _nll)
    del warm, wp, wb
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, seq), generator=g)
    _reset_peak()
    base = _rss()
    trainer, policy = _trainer(cfg, vocab, actor=role == "actor", critic=role == "critic")
    del policy  # the critic's run must not hold the policy it was initialised from
    from t1.train.batch import Row, collate

    layers, k = cfg.model.layers, cfg.model.top_k
    routing = (
        torch.randint(0, cfg.model.experts, (seq, layers, k), generator=g, dtype=torch.int16)
        if role == "actor"
        else None
    )
    # every position in the loss region: the planner's logits term is the output layer on
    # every token, the most loss_region_logp computes
    mask = [1] * seq
    batch = collate(
        [Row(ids=ids[i].tolist(), loss_mask=mask, routing=routing) for i in range(rows)]
    )
    update = trainer.actor_update if role == "actor" else trainer.critic_update
    for _ in range(2):  # the second step holds the optimizer state from the first
        update(batch, _nll)
    peak = _peak_rss()
    print(json.dumps({"role": role, "measured_bytes": peak - base}))


def bench_memory(config: str | None, rows: int, seq: int) -> dict[str, Any]:
    """Measured peak vs the planner's prediction for both roles (child processes)."""
    from t1.model.memory_breakdown import GIB, Layout, breakdown
    from t1.model.memory_spec import tiny_spec

    cfg = _cfg(config)
    spec = dataclasses.replace(tiny_spec(cfg), seq_len=seq, micro_batch=rows)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out: dict[str, Any] = {"rows": rows, "seq": seq}
    for role in ("actor", "critic"):
        code = f"from t1.bench.train import _memory_child; _memory_child({config!r}, {role!r}, {rows}, {seq})"
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory child for {role} failed:\n{proc.stderr[-2000:]}")
        measured = json.loads(proc.stdout.strip().splitlines()[-1])["measured_bytes"]
        predicted = sum(breakdown(spec, Layout(1, 1, dist_opt=False), role).values())
        out[role] = {
            "measured_mib": measured / 2**20,
            "predicted_mib": predicted / 2**20,
            "predicted_over_measured": predicted / measured,
            "predicted_gib": predicted / GIB,
        }
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="campaign YAML (default: the tiny defaults)")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=("replay", "throughput", "loss_region", "picked_logp", "length_groups", "memory"),
    )
    parser.add_argument(
        "--loss-fraction",
        type=float,
        default=0.35,
        help="loss_region, picked_logp, length_groups: share of each row in the loss region "
        "(default 0.35)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: run.threads)"
    )
    parser.add_argument("--json", default=None, help="also write the result here")


def main(args: argparse.Namespace) -> int:
    cfg = _cfg(args.config)
    if args.threads:
        cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, threads=args.threads))
    torch.set_num_threads(cfg.run.threads)
    result: dict[str, Any] = {
        "threads": cfg.run.threads,
        "model": dataclasses.asdict(cfg.model),
        "vocab": cfg.tokenizer.vocab_size,
    }
    if "replay" not in args.skip:
        result["replay"] = bench_replay(cfg, args.rows, args.seq, args.repeats)
    if "throughput" not in args.skip:
        result["throughput"] = bench_throughput(cfg, args.rows, args.seq, args.repeats)
    if "loss_region" not in args.skip:
        if not 0.0 < args.loss_fraction <= 1.0:
            raise SystemExit(f"--loss-fraction must be in (0, 1], got {args.loss_fraction}")
        result["loss_region"] = bench_loss_region(
            cfg, args.rows, args.seq, args.repeats, args.loss_fraction
        )
    if "picked_logp" not in args.skip:
        result["picked_logp"] = bench_picked_logp(
            cfg, args.rows, args.seq, args.repeats, args.loss_fraction
        )
    if "length_groups" not in args.skip:
        result["length_groups"] = bench_length_groups(
            cfg, args.rows, args.seq, args.repeats, args.loss_fraction
        )
    if "memory" not in args.skip:
        result["memory"] = bench_memory(args.config, args.rows, args.seq)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
