"""Evaluate a policy on a task set: resolved rate and mean reward, overall and per category.

    t1 evaluate --config workflow/config/tiny.yaml --policy results/tiny/ppo/iter_00002/actor \\
                --tokenizer results/tiny/tokenizer --out results/tiny/eval/final

Every task runs `--samples` times (no over-sampling: all trajectories are kept, so long tasks
are not under-counted), each in a fresh sandbox, with the verifier and the run's reward.
Writes OUT/eval.json (schema_version, status, summary, per-task rows) and the trajectories.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

from t1.config import load_config
from t1.records import write_json_atomic
from t1.rollout import collect, load_tasks, write_batch
from t1.trajectory import Trajectory

SCHEMA_VERSION = 1


def summarize(trajs: list[Trajectory]) -> dict[str, Any]:
    """Resolved rate, mean reward and status counts, overall and per category."""

    def block(items: list[Trajectory]) -> dict[str, Any]:
        scored = [t for t in items if t.reward is not None]
        return {
            "trajectories": len(items),
            "scored": len(scored),
            "resolved_rate": sum(bool(t.metadata.get("resolved")) for t in items) / len(items) if items else 0.0,
            "mean_reward": sum(t.reward for t in scored) / len(scored) if scored else 0.0,
            "mean_passed_fraction": (
                sum(t.metadata["passed"] / t.metadata["total"] for t in scored if t.metadata.get("total"))
                / len(scored)
                if scored
                else 0.0
            ),
            "mean_turns": sum(len(t.turns) for t in items) / len(items) if items else 0.0,
        }

    by_cat: dict[str, list[Trajectory]] = defaultdict(list)
    statuses: dict[str, int] = defaultdict(int)
    for t in trajs:
        by_cat[str(t.metadata.get("category", "unknown"))].append(t)
        statuses[t.status.value] += 1
    return {"overall": block(trajs), "by_category": {c: block(v) for c, v in sorted(by_cat.items())}, "by_status": dict(statuses)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--policy", required=True, type=Path, help="policy directory (weights)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: <results>/<run>/tokenizer)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tasks", nargs="+", help="task dirs (default: config tasks.eval_dirs)")
    parser.add_argument("--samples", type=int, default=1, help="trajectories per task")
    parser.add_argument("--label", default="", help="a name for this evaluation in the report")


def main(args: argparse.Namespace) -> int:
    from t1.engine import make_engine
    from t1.tokenizer import load_tokenizer

    cfg = load_config(args.config)
    run_dir = Path(cfg.run.results_dir) / cfg.run.name
    tokenizer_dir = args.tokenizer or run_dir / "tokenizer"
    tokenizer = load_tokenizer(tokenizer_dir)
    tasks = load_tasks(args.tasks or cfg.tasks.eval_dirs, cfg.run.seed)
    batch_tasks = [t for t in tasks for _ in range(max(1, args.samples))]
    engine = make_engine(cfg, args.policy)
    batch = collect(batch_tasks, engine, tokenizer, cfg, admit=len(batch_tasks), seed=cfg.run.seed)
    write_batch(batch, args.out, tokenizer_dir)
    summary = summarize(batch.admitted)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "label": args.label or str(args.policy),
        "policy": str(args.policy),
        "summary": summary,
        "tasks": [
            {
                "task": t.task_id,
                "status": t.status.value,
                "reward": t.reward,
                "passed": t.metadata.get("passed"),
                "total": t.metadata.get("total"),
                "resolved": bool(t.metadata.get("resolved")),
                "turns": len(t.turns),
            }
            for t in batch.admitted
        ],
    }
    write_json_atomic(args.out / "eval.json", doc)
    o = summary["overall"]
    print(f"evaluate: {o['trajectories']} trajectories, resolved {o['resolved_rate']:.1%}, mean reward {o['mean_reward']:.3f} -> {args.out}")
    return 0
