"""`t1 evaluate`: a policy on a task set, each task k times; resolved rate with its interval.

    t1 evaluate --policy results/tiny/sft/model/actor --tasks workflow/tasks --k 4 --json e.json
    t1 evaluate --config workflow/config/tiny.yaml --policy results/tiny/ppo/.../actor \\
                --tokenizer results/tiny/tokenizer --tasks results/tiny/pool/eval/tasks \\
                --label ppo --out results/tiny/eval/ppo          # what the campaign runs
    t1 evaluate --expert --tasks workflow/tasks --tokenizer DIR    # reference solutions (sanity)

Every task runs `--k` times (no over-sampling: every trajectory launched counts, so long tasks
are not under-counted), each in a fresh sandbox (both layouts: v1 task.yaml, v2 task.toml),
with the verifier and the run's reward (t1.rollout.collect). A trajectory the verifier could not score
(sandbox or agent failure, TITO abort) counts as launched and unresolved, and is counted as
`unscored`; assertion means are over the scored ones.

Reported overall, per category and per difficulty (t1.eval.stats holds the math):
* resolved rate over trajectories, with its 95% Wilson score interval (`ci95`);
* pass@1 and pass@k: the unbiased estimator of Chen et al. 2021, 1 - C(n-c, k)/C(n, k) per
  task (n runs, c resolved), averaged over the tasks;
* mean assertions passed (count, and fraction of the task's assertions), mean reward, turns.

Outputs: `--out DIR` writes DIR/eval.json, DIR/eval.md and the trajectories (t1.rollout.collect
layout); `--json FILE` writes the same JSON document to FILE; the Markdown goes to stdout.
The JSON (schema_version 2, status "complete") holds `k`, `summary` {overall, by_category,
by_difficulty, by_status, verifier_retried}, `tasks` (one row per task) and `trajectories` (one row per run).
Without `--config` the defaults of t1/config.py apply; the tokenizer defaults to the run's
(<results>/<run>/tokenizer). Reward: the run's (t1.rollout.collect.reward_of); tasks outside a pool
with `reward.scale` 0 are scored passed/10, as `t1 oracle` does (the reward column is for
reading only; the resolved rate does not depend on it).

The figures of a group of rows, and the campaign's RUN_DIR/summary.json (the SFT and PPO
evaluations split into held-out, unseen-name held-out and train-pool tasks), are in
t1/eval/summary.py. The campaign's eval pool holds t1 families' three splits (train, heldout,
heldout_unseen: workflow/rules/common.smk `family_dirs`), so one evaluation covers them all;
summary.json tells them apart by the train pool and RUN/tasks/families/families.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from t1.config import Config, load_config
from t1.eval.summary import block
from t1.records import write_atomic, write_json_atomic
from t1.tasks.model import Task
from t1.verify.reward import RewardError, RewardSpec

SCHEMA_VERSION = 2


# --------------------------------------------------------------------------- the numbers


def attempt_rows(batch) -> list[dict[str, Any]]:
    """One row per launched trajectory of a RolloutBatch: the admitted and the unscored."""
    rows = []
    for t in batch.admitted:
        scored = t.reward is not None and bool(t.metadata.get("total"))
        rows.append(
            {
                "task": t.task_id,
                "status": t.status.value,
                "reason": t.reason,
                "scored": scored,
                "resolved": bool(t.metadata.get("resolved")) if scored else False,
                "passed": t.metadata.get("passed") if scored else None,
                "total": t.metadata.get("total") if scored else None,
                "reward": t.reward,
                "turns": len(t.turns),
                "verifier_tries": t.metadata.get("verifier_tries", 1),
            }
        )
    for d in batch.dropped:  # with admit = launched, only runs that did not complete are here
        rows.append(
            {
                "task": d["task"],
                "status": d.get("status", "FAILED"),
                "reason": d.get("reason"),
                "scored": False,
                "resolved": False,
                "passed": None,
                "total": None,
                "reward": None,
                "turns": d.get("turns", 0),
            }
        )
    return rows


def summarize(rows: list[dict[str, Any]], tasks: dict[str, Task], k: int) -> dict[str, Any]:
    """Overall, per category and per difficulty blocks, trajectory counts by status, and how
    many verifier runs erred and ran again (t1.agent.loop.verify_with_retry)."""
    groups: dict[str, dict[str, list]] = {
        "by_category": defaultdict(list),
        "by_difficulty": defaultdict(list),
    }
    statuses: dict[str, int] = defaultdict(int)
    for r in rows:
        task = tasks.get(r["task"])
        groups["by_category"][task.category if task else "unknown"].append(r)
        groups["by_difficulty"][task.difficulty if task else "unknown"].append(r)
        statuses[r["status"]] += 1
    return {
        "overall": block(rows, k),
        **{name: {key: block(v, k) for key, v in sorted(g.items())} for name, g in groups.items()},
        "by_status": dict(sorted(statuses.items())),
        "verifier_retried": sum(r.get("verifier_tries", 1) > 1 for r in rows),
    }


def task_rows(rows: list[dict[str, Any]], tasks: dict[str, Task], k: int) -> list[dict[str, Any]]:
    out = []
    for tid, task in tasks.items():
        b = block([r for r in rows if r["task"] == tid], k)
        out.append(
            {
                "task": tid,
                "path": str(task.path),
                "layout": task.layout,
                "category": task.category,
                "difficulty": task.difficulty,
                "runs": b["trajectories"],
                "resolved": b["resolved"],
                "pass_at_1": b["pass_at_1"],
                "pass_at_k": b["pass_at_k"],
                "mean_assertions_passed": b["mean_assertions_passed"],
                "unscored": b["unscored"],
            }
        )
    return out


# --------------------------------------------------------------------------- Markdown


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _retried(n: int) -> str:
    return f" {n} verifier runs erred (timed out, killed) and ran again." if n else ""


def markdown(doc: dict[str, Any]) -> str:
    k = doc["k"]
    pass_k = f" pass@{k} |" if k > 1 else ""  # pass@1 is already there
    head = (
        f"| group | tasks | runs | resolved | rate | 95% CI (Wilson) | pass@1 |{pass_k} "
        "mean assertions passed | unscored |"
    )
    lines = [
        f"# Evaluation: {doc['label']}",
        "",
        f"Policy `{doc['policy']}`, {doc['summary']['overall']['tasks']} tasks x {k} runs; "
        f"reward {doc['reward']['kind']}, scale {doc['reward']['scale']:g}."
        + _retried(doc["summary"].get("verifier_retried", 0)),
        "",
    ]

    def row(name: str, b: dict[str, Any]) -> str:
        ci = "-" if b["ci95"] is None else f"[{b['ci95'][0]:.1%}, {b['ci95'][1]:.1%}]"
        return (
            f"| {name} | {b['tasks']} | {b['trajectories']} | {b['resolved']} | "
            f"{_pct(b['resolved_rate'])} | {ci} | {_pct(b['pass_at_1'])} |"
            + (f" {_pct(b['pass_at_k'])} |" if k > 1 else "")
            + f" "
            f"{_num(b['mean_assertions_passed'])} | {b['unscored']} |"
        )

    s = doc["summary"]
    for title, items in (
        ("Overall", {"all": s["overall"]}),
        ("By category", s["by_category"]),
        ("By difficulty", s["by_difficulty"]),
    ):
        lines += [f"## {title}", "", head, "|" + "---|" * head.count(" |")]
        lines += [row(name, b) for name, b in items.items()]
        lines.append("")
    lines += ["## Tasks", "", "| task | layout | category | difficulty | runs | resolved | "
              f"pass@{k} | mean assertions passed |", "|" + "---|" * 8]  # fmt: skip
    for t in doc["tasks"]:
        lines.append(
            f"| {t['task']} | {t['layout']} | {t['category']} | {t['difficulty']} | {t['runs']} | "
            f"{t['resolved']} | {_pct(t['pass_at_k'])} | {_num(t['mean_assertions_passed'])} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="campaign config (default: t1/config.py defaults)"
    )
    parser.add_argument("--policy", type=Path, help="policy directory (weights); not with --expert")
    parser.add_argument(
        "--expert", action="store_true", help="run the reference solutions instead of a policy"
    )
    parser.add_argument(
        "--tasks", nargs="+", help="task dirs or pools (default: config tasks.eval_dirs)"
    )
    parser.add_argument("--k", "--samples", dest="k", type=int, default=1, help="runs per task")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the JSON document here")
    parser.add_argument("--out", type=Path, help="directory: eval.json, eval.md, trajectories")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer directory (default: <results>/<run>/tokenizer)"
    )
    parser.add_argument("--label", default="", help="a name for this evaluation in the report")


def _reward(cfg: Config, tasks: list[Task]) -> RewardSpec:
    from t1.rollout.collect import reward_of

    try:
        return reward_of(cfg, tasks)
    except RewardError as e:
        scale = cfg.reward.scale if cfg.reward.scale > 0 else RewardSpec().scale
        print(
            f"t1 evaluate: {e}; scoring reward as passed/{scale:g} (for reading only)",
            file=sys.stderr,
        )
        return RewardSpec(kind=cfg.reward.kind, scale=scale, subtract_noop=False)


def run(cfg: Config, tasks: list[Task], k: int, tokenizer, policy: Path | None, reward: RewardSpec):
    """Every task k times: a RolloutBatch of all runs (the policy's, or the expert's)."""
    from t1.progress import Progress
    from t1.rollout.collect import RolloutBatch, collect, expert_batch

    batch_tasks = [t for t in tasks for _ in range(k)]
    if policy is None:  # the reference solutions, one task at a time
        t0 = time.monotonic()
        batch = RolloutBatch(launched=len(batch_tasks))
        with Progress(len(batch_tasks), "evaluate") as bar:
            for task in batch_tasks:
                one = expert_batch([task], tokenizer, cfg, progress=False, reward=reward)
                batch.admitted += one.admitted
                t = one.admitted[0]
                bar.advance(
                    note=f"{task.id} {'resolved' if t.metadata.get('resolved') else t.status.value}"
                )
        batch.seconds = time.monotonic() - t0
        return batch
    from t1.engine import make_engine

    engine = make_engine(cfg, policy)
    return collect(batch_tasks, engine, tokenizer, cfg, admit=len(batch_tasks), seed=cfg.run.seed,
                   reward=reward, label="evaluate")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from t1.agent.tokenizer import load_tokenizer
    from t1.rollout.collect import load_tasks, write_batch

    if (args.policy is None) == (not args.expert):
        print("t1 evaluate: give --policy DIR or --expert (one of them)", file=sys.stderr)
        return 2
    if args.k < 1:
        print(f"t1 evaluate: --k must be >= 1, got {args.k}", file=sys.stderr)
        return 2
    cfg = load_config(args.config) if args.config else Config()
    tokenizer_dir = args.tokenizer or Path(cfg.run.results_dir) / cfg.run.name / "tokenizer"
    try:
        tokenizer = load_tokenizer(tokenizer_dir)
    except (FileNotFoundError, ValueError) as e:
        print(f"t1 evaluate: {e} (give --tokenizer DIR)", file=sys.stderr)
        return 2
    tasks = load_tasks(args.tasks or cfg.tasks.eval_dirs, cfg.run.seed)
    by_id: dict[str, Task] = {}
    for t in tasks:
        if t.id in by_id and by_id[t.id].path != t.path:
            print(f"t1 evaluate: two tasks named {t.id} ({by_id[t.id].path}, {t.path}): rows are "
                  "keyed by task id; evaluate them separately", file=sys.stderr)  # fmt: skip
            return 2
        by_id[t.id] = t
    tasks = list(by_id.values())
    reward = _reward(cfg, tasks)
    batch = run(cfg, tasks, args.k, tokenizer, None if args.expert else args.policy, reward)
    rows = attempt_rows(batch)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "label": args.label or ("expert" if args.expert else str(args.policy)),
        "policy": "expert" if args.expert else str(args.policy),
        "k": args.k,
        "reward": {
            "kind": reward.kind,
            "scale": reward.scale,
            "subtract_noop": reward.subtract_noop,
        },
        "seconds": round(batch.seconds, 3),
        "summary": summarize(rows, by_id, args.k),
        "tasks": task_rows(rows, by_id, args.k),
        "trajectories": rows,
    }
    text = markdown(doc)
    if args.out is not None:
        write_batch(batch, args.out, tokenizer_dir)
        write_json_atomic(args.out / "eval.json", doc)
        write_atomic(args.out / "eval.md", text)
    if args.json is not None:
        write_json_atomic(args.json, doc)
    print(text)
    o = doc["summary"]["overall"]
    lo, hi = o["ci95"] or (0.0, 0.0)
    print(
        f"evaluate: {o['trajectories']} runs of {o['tasks']} tasks, resolved {_pct(o['resolved_rate'])} "
        f"(95% CI {lo:.1%}-{hi:.1%}), pass@{args.k} {_pct(o['pass_at_k'])}"
        + (f" -> {args.out}" if args.out else "")
    )
    return 0
