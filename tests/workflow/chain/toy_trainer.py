"""A stand-in for `t1 segment` in workflow tests: resumable steps, atomic checkpoints, stop flag.

    python tests/workflow/chain/toy_trainer.py --ckpt out/ckpt --until 8 --out out/iter_00001/DONE

Runs global steps up to --until (a random walk, RNG state in the checkpoint, one checkpoint
per step with t1.store.ckpt), resuming from the newest complete checkpoint; heartbeats every step;
on SIGUSR2/SIGTERM finishes the step, checkpoints and exits 75; at --until writes --out.
Each start appends a line to CKPT/../runs.log (first step, restart, Slurm job and restart
count) so tests can count starts and check that no step ran twice.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from t1.store.ckpt_retention import CheckpointManager
from t1.supervise.child import EXIT_REQUEUE, StopRequest, heartbeat


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--until", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--step-s", type=float, default=0.2)
    args = p.parse_args()
    stop = StopRequest()
    Path(args.ckpt).mkdir(parents=True, exist_ok=True)
    mgr = CheckpointManager(args.ckpt, keep=2)
    ck = mgr.latest()
    if ck:
        state, history = ck.load("state"), ck.load("metrics")
        version, internal, gauss = ck.load("rng")
        random.setstate((version, tuple(internal), gauss))
    else:
        random.seed(11)
        state, history = {"step": 0, "x": 0.0}, []
    start = {
        "step": state["step"],
        "until": args.until,
        "restart": os.environ.get("T1_RESTART"),
        "job": os.environ.get("SLURM_JOB_ID"),
        "slurm_restarts": os.environ.get("SLURM_RESTART_COUNT", "0"),
        "time": time.time(),
    }
    with open(Path(args.ckpt).parent / "runs.log", "a") as f:
        f.write(json.dumps(start) + "\n")
    print("resume at", state["step"], flush=True)
    while state["step"] < args.until:
        heartbeat()
        time.sleep(args.step_s)
        state["x"] += random.gauss(0, 1)
        state["step"] += 1
        history.append([state["step"], state["x"]])
        mgr.save(
            state["step"],
            {"state": state, "metrics": history, "rng": random.getstate()},
            formats={"rng": "json"},
        )
        print("step", state["step"], flush=True)
        if stop.requested and state["step"] < args.until:
            print(f"checkpointed at {state['step']} after {stop.signal}", flush=True)
            mgr.close()
            return EXIT_REQUEUE
    mgr.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"schema_version": 1, "status": "complete", "step": state["step"]}))
    os.replace(tmp, out)
    heartbeat()
    return 0


if __name__ == "__main__":
    sys.exit(main())
