"""`t1 bench gpu`: the megatron backend on one GPU, replay on and off, in under 5 minutes.

    t1 bench gpu [--steps 5] [--rows 8] [--len 512] [--json FILE]

A tiny Qwen3-MoE (4 layers, hidden 256, 16 experts, top-2) with routing recorded by a second
model of the same shape (so replay really moves experts), timed over `--steps` critic-first PPO
steps (t1.train.step.ppo_step) per setting: replay on, replay off. Per setting: step time,
tokens/s, peak GPU memory, the train-inference gap against the recording model's logprobs, and
the share of (token, layer) pairs routed to the recorded experts. Prints one JSON object.
Without CUDA or megatron-core it prints {"skipped": reason} and exits 0; `--cpu-shim` runs it on
the CPU through the tests' shim (tests/megatron/cpu_shim.py), for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=5, help="PPO steps per setting")
    parser.add_argument("--rows", type=int, default=8, help="rows per batch")
    parser.add_argument("--len", type=int, default=512, help="tokens per row")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument(
        "--cpu-shim", action="store_true", help="smoke run on the CPU (tests' shim)"
    )


def _rows(recorder, actor_vocab: int, rows: int, length: int, device):
    from t1.model.routing import RoutingCapture
    from t1.train.batch import Row
    from t1.train.hf import token_logp

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(rows):
        ids = torch.randint(0, actor_vocab, (length,), generator=g)
        mask = torch.zeros(length, dtype=torch.bool)
        mask[length // 4 :] = True
        with torch.no_grad(), RoutingCapture(recorder) as cap:
            logits = recorder(input_ids=ids[None].to(device), use_cache=False).logits
        logp = token_logp(logits.float().cpu(), ids[None])[0] * mask
        out.append(
            Row(
                ids.tolist(),
                mask.tolist(),
                logp.tolist(),
                cap.collect().to(torch.int16).cpu(),
                reward=float(i % 2),
            )
        )
    return out


def run(steps: int, rows: int, length: int) -> dict:
    from t1.config import ModelConfig, PPOConfig
    from t1.model.policy import Critic, build_policy
    from t1.train.batch import collate
    from t1.train.megatron import replay as R
    from t1.train.megatron.model import forward
    from t1.train.megatron.trainer import MegatronTrainer
    from t1.train.step import ppo_step

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    mc = ModelConfig(
        layers=4,
        hidden=256,
        heads=8,
        kv_heads=2,
        head_dim=32,
        intermediate=512,
        expert_intermediate=128,
        experts=16,
        top_k=2,
    )
    vocab = 1024
    recorder = build_policy(mc, vocab, seed=1).to(device)
    batch = collate(_rows(recorder, vocab, rows, length, device))
    del recorder
    result: dict = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "rows": rows,
        "len": length,
        "steps": steps,
        "model": mc.__dict__ | {"vocab": vocab},
    }
    for replay in (True, False):
        actor = build_policy(mc, vocab, seed=0)
        critic = Critic.from_policy(actor, seed=1)
        tr = MegatronTrainer(
            actor, critic, actor_lr=1e-5, critic_lr=1e-4, replay=replay, device=device
        )
        with (
            R.RoutingObserver(tr.actor) as seen,
            torch.no_grad(),
            R.replaying(tr.actor, batch.routing[:1]) if replay else _null(),
        ):
            forward(tr.actor, batch.input_ids[:1].to(device))
        got, rec = seen.routing(1, mc.top_k), batch.routing[:1].long().sort(-1).values
        agree = float((got == rec).all(-1).float().mean())
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times, gaps = [], []
        for _ in range(steps):
            t0 = time.perf_counter()
            m = ppo_step(tr, batch, PPOConfig(minibatch=max(1, rows // 2)))
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            gaps.append(m["gap"])
        warm = times[1:] or times
        st = sum(warm) / len(warm)
        result["replay_on" if replay else "replay_off"] = {
            "step_time_s": round(st, 4),
            "tokens_per_s": round(batch.tokens / st, 1),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
            "gap_first": gaps[0],
            "gap_last": gaps[-1],
            "routed_to_recorded": agree,
        }
    return result


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(args: argparse.Namespace) -> int:
    from t1.train.megatron.runtime import available

    ok, why = available()
    if args.cpu_shim and not torch.cuda.is_available():
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "megatron"))
        import cpu_shim

        cpu_shim.install()
    if not ok:
        out = {"skipped": why}
    elif not torch.cuda.is_available() and not args.cpu_shim:
        out = {
            "skipped": "no CUDA device (megatron-core 0.16.1 needs one; --cpu-shim smoke-runs on the CPU)"
        }
    else:
        out = run(args.steps, args.rows, args.len)
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
