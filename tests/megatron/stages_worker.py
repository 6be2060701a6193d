"""One rank of the world-size-2 SFT / critic warm-up checks (test_megatron_stages.py runs it):

    torchrun --nproc-per-node 2 tests/megatron/stages_worker.py --dir DIR

DIR holds the test's configs (ep2.yaml: train.backend megatron, train.gpus 2, EP 2; dp2.yaml:
the same with EP 1, so a checkpoint of one is another layout for the other), the starting
policy (DIR/sft/actor), the trajectories (DIR/rollout) and a world-size-1 megatron SFT stopped
after one step (DIR/ws1_partial). Every run is `t1.train.cli.main` (the real `t1 train`) in
these two processes, one after the other, into DIR/outs/NAME:

  sft / critic        the whole stage at EP 2 (DP 2 for the dense weights)
  sft_dp2             the whole SFT at EP 1 / DP 2 (experts replicated)
  sft_resume          --max-steps 1 (exit 0, not DONE), copied to DIR/outs/sft_ep2_partial,
                      then rerun to the end from its per-rank checkpoint
  critic_stop         rank 1 alone gets a real SIGUSR2 during step 1 (as `t1 supervise` or Slurm
                      would send it); both ranks must stop at the same boundary (exit 75), then
                      a rerun finishes the stage
  refuse_ws1          the world-size-1 checkpoint of DIR/ws1_partial: refused (exit 5)
  refuse_layout       the EP 2 checkpoint of sft_ep2_partial resumed at EP 1: refused (exit 5)

Each rank writes DIR/rank_R.json: every run's exit code and printed lines. The CPU shim as in
shimmed_cli.py (no activation recompute).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")

import cpu_shim  # noqa: E402

cpu_shim.install(recompute=False)


def ns(cfg: Path, stage: str, inputs: Path, source: Path, out: Path, **kw) -> argparse.Namespace:
    return argparse.Namespace(
        config=str(cfg),
        stage=stage,
        inputs=[str(inputs)],
        source=str(source),
        out=str(out),
        critic=None,
        tokenizer=None,
        max_steps=kw.get("max_steps"),
        restart_stage=False,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    d = Path(ap.parse_args().dir)
    import torch.distributed as dist

    import t1.train.critic_warmup as CW
    from t1.train import cli

    rank = int(os.environ["RANK"])
    outs = d / "outs"
    results: dict[str, list] = {}

    def run(name: str, *a, **kw) -> int:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli.main(ns(*a, **kw))
        results.setdefault(name, []).append({"rc": rc, "stdout": buf.getvalue()})
        print(f"rank {rank} {name}: exit {rc}\n{buf.getvalue()}", flush=True)
        return rc

    ep2, dp2, rollout, sft = d / "ep2.yaml", d / "dp2.yaml", d / "rollout", d / "sft"
    run("sft", ep2, "sft", rollout, sft / "actor", outs / "sft")
    run("critic", ep2, "critic_warmup", rollout, sft, outs / "critic")
    run("sft_dp2", dp2, "sft", rollout, sft / "actor", outs / "sft_dp2")

    run("sft_resume", ep2, "sft", rollout, sft / "actor", outs / "sft_resume", max_steps=1)
    dist.barrier()
    if rank == 0:
        ignore = shutil.ignore_patterns(".t1-writer.lock")
        shutil.copytree(outs / "sft_resume", outs / "sft_ep2_partial", ignore=ignore)
    dist.barrier()
    run("sft_resume", ep2, "sft", rollout, sft / "actor", outs / "sft_resume")

    loss, calls = CW.warmup_loss, []

    def signalled_loss(values, batch):  # rank 1 alone is signalled, during step 1
        calls.append(1)
        if rank == 1 and len(calls) == 1:
            os.kill(os.getpid(), signal.SIGUSR2)
        return loss(values, batch)

    CW.warmup_loss = signalled_loss
    run("critic_stop", ep2, "critic_warmup", rollout, sft, outs / "critic_stop")
    CW.warmup_loss = loss
    run("critic_stop", ep2, "critic_warmup", rollout, sft, outs / "critic_stop")

    run("refuse_ws1", ep2, "sft", rollout, sft / "actor", d / "ws1_partial")
    run("refuse_layout", dp2, "sft", rollout, sft / "actor", outs / "sft_ep2_partial")
    (d / f"rank_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
