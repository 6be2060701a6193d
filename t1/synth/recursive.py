"""The recursive loop of RST: seeds -> extend -> realign -> validate -> accepted become seeds.

    t1 synth --rounds 5 --out results/synth --per-round 48 --jobs 2      (see t1/synth/cli.py)

    summary = run(SynthOptions(out=Path("results/synth"), rounds=5, per_round=48))

Round 0 holds the seeds: `per_round` one-step library tasks, or the tasks of `--seeds DIR`
(our own rendered tasks, or foreign v2 tasks whose tests/test.sh runs tests/test_outputs.py).
Each later round draws `per_round` children from the previous round's accepted tasks (parents
in a seeded shuffle, reused round-robin when fewer), each child adding 1-2 steps (or one
model-written step, for a fraction of them when a language model is configured), renders
them in the v2 layout, validates them in fresh sandboxes (t1.synth.validate), and keeps the
accepted ones. Everything is seeded per (seed, round, candidate): the same command gives the
same tasks whatever `--jobs` is. That also makes an interrupted run (no DONE.json yet)
resumable: started again with the same arguments it regenerates the same candidates and
reuses the validation.json of those already settled (the old events go to
metrics.jsonl.prev<N>; a `synth_resume` event marks the restart).

Output (DIR; `t1 oracle DIR`, `t1 audit DIR`, `t1 pool --in DIR` see the accepted tasks only,
since task discovery skips names starting with "_" or "."):
    <id>/                   accepted tasks, v2 layout + synth.json + validation.json
    _rejected/<id>/         rejected candidates with validation.json (the reasons)
    _submitit/              Slurm array logs (--executor slurm)
    metrics.jsonl           events: synth_candidate (one per candidate), synth_round
    rounds.json, rounds.md  the per-round table; rounds.png its plot
    summary.json            schema_version, status, counts, wall seconds, tasks per minute
    DONE.json               the same summary, written last when the run completed (the
                            workflow's marker)
"""

from __future__ import annotations

import io
import json
import random
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1.progress import Progress
from t1.records import write_atomic, write_json_atomic
from t1.store.metrics_log import MetricsLog
from t1.synth.draft import Draft, extend, load_draft, metrics, render, seed_draft, with_step
from t1.synth.validate import validate_many

SCHEMA_VERSION = 1
TABLE_KEYS = (
    "round",
    "candidates",
    "accepted",
    "rejected",
    "acceptance_rate",
    "median_steps",
    "median_solution_lines",
    "median_commands",
    "median_assertions",
    "median_noop_score",
    "wall_s",
)


@dataclass
class SynthOptions:
    out: Path
    rounds: int = 3
    per_round: int = 20
    seed: int = 0
    jobs: int = 2
    seeds_dir: Path | None = None
    executor: str = "local"  # local | slurm
    backend: str = "bwrap"
    cache_dir: Path | None = None  # environment layers (None: t1.verify.oracle's default)
    steps_min: int = 1
    steps_max: int = 2
    llm: Any = None  # t1.synth.llm.LLMSynthesizer, or None
    llm_fraction: float = 0.0
    keep_rejected: bool = True
    slurm: dict[str, Any] = field(default_factory=dict)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


class _Run:
    def __init__(self, opts: SynthOptions) -> None:
        self.o = opts
        self.out = Path(opts.out)
        self.resumed = False
        names = {p.name: p for p in self.out.iterdir()} if self.out.is_dir() else {}
        if "DONE.json" in names or "summary.json" in names:
            raise FileExistsError(f"{self.out}: holds a finished synthesis run; choose a new --out")
        if "metrics.jsonl" in names:
            # an interrupted run of ours: the same seeds regenerate the same candidates, whose
            # validation.json rows are reused; the old events are kept aside
            n = len(list(self.out.glob("metrics.jsonl.prev*")))
            names["metrics.jsonl"].rename(self.out / f"metrics.jsonl.prev{n}")
            shutil.rmtree(self.out / "_staging", ignore_errors=True)
            self.resumed = True
        elif any(p.is_dir() and not n.startswith((".", "_")) for n, p in names.items()):
            raise FileExistsError(f"{self.out}: already holds tasks; choose a new --out")
        for sub in ("_rejected", "_staging"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        self.log = MetricsLog(self.out, tensorboard=False)
        if self.resumed:
            self.log.write("synth_resume", step=0, out=str(self.out))
        self.table: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    # -- candidates -----------------------------------------------------------------------

    def seeds(self) -> list[Draft]:
        o = self.o
        if o.seeds_dir is None:
            return [seed_draft(random.Random(f"{o.seed}:0:{i}"), 0) for i in range(o.per_round)]
        from t1.tasks import find_tasks

        drafts = []
        for p in find_tasks([o.seeds_dir]):
            try:
                drafts.append(load_draft(p))
            except ValueError as e:
                self.log.write(
                    "synth_candidate", step=0, task=p.name, status="rejected", reasons=[str(e)]
                )
                print(f"t1 synth: seed {p} skipped: {e}", file=sys.stderr)
        return drafts

    def children(
        self, parents: list[Draft], round_: int
    ) -> tuple[list[Draft], list[dict[str, Any]]]:
        """This round's candidates, and rows for model candidates rejected before validation."""
        o = self.o
        order = list(parents)
        random.Random(f"{o.seed}:{round_}:parents").shuffle(order)
        n_llm = round(o.per_round * o.llm_fraction) if o.llm is not None else 0
        drafts, early = [], []
        for i in range(o.per_round):
            parent = order[i % len(order)]
            rng = random.Random(f"{o.seed}:{round_}:{i}")
            if i < n_llm:
                step, reasons, raw = o.llm.propose(parent, rng)
                if step is None:
                    early.append(
                        {
                            "task": f"llm-r{round_:02d}-{i}",
                            "parent": parent.id,
                            "origin": "llm",
                            "status": "rejected",
                            "reasons": reasons,
                            "raw": raw[-2000:],
                        }
                    )
                    continue
                drafts.append(with_step(parent, step, round_, origin="llm"))
                continue
            drafts.append(extend(parent, rng, rng.randint(o.steps_min, o.steps_max), round_))
        return drafts, early

    # -- one round --------------------------------------------------------------------------

    def round(self, round_: int, drafts: list[Draft], early: list[dict[str, Any]]) -> list[Draft]:
        t0 = time.monotonic()
        staged: dict[str, Draft] = {}
        reused: list[dict[str, Any]] = []
        for d in drafts:
            if d.id in staged or any(r["task"] == d.id for r in reused):
                continue  # an identical candidate this round
            prior = self._prior(d.id)
            if prior is not None:  # validated before an interruption
                reused.append(prior)
                staged[d.id] = d
                continue
            render(d, self.out / "_staging" / d.id)
            staged[d.id] = d
        fresh = [i for i in staged if not any(r["task"] == i for r in reused)]
        # t1.progress: validations with an ETA (a live line, or log lines in a Slurm log)
        bar = Progress(len(fresh), f"synth round {round_}")

        def progress(row: dict[str, Any]) -> None:
            bar.advance(note=f"{row['task']} {row['status']}")

        rows = reused + validate_many(
            [self.out / "_staging" / i for i in fresh],
            jobs=self.o.jobs,
            backend=self.o.backend,
            cache_dir=self.o.cache_dir,
            executor=self.o.executor,
            folder=self.out / "_submitit",
            slurm=dict(self.o.slurm),
            on_row=progress,
        )
        bar.close()
        accepted: list[Draft] = []
        for row in rows:
            d = staged[row["task"]]
            src = self.out / "_staging" / d.id
            ok = row["status"] == "accepted"
            if row.get("reused"):
                accepted += [d] if ok else []
            else:
                row["path"] = str(self.out / d.id if ok else self.out / "_rejected" / d.id)
                write_json_atomic(src / "validation.json", row)
                if ok:
                    src.rename(self.out / d.id)
                    accepted.append(d)
                elif self.o.keep_rejected:
                    src.rename(self.out / "_rejected" / d.id)
                else:
                    shutil.rmtree(src)
            self.log.write(
                "synth_candidate",
                step=round_,
                task=d.id,
                parent=d.parent,
                origin=d.origin,
                kinds=[s.kind for s in d.steps[d.new_from :]],
                status=row["status"],
                reasons=row["reasons"],
                noop_score=row.get("noop_score"),
                metrics=row.get("metrics") or metrics(d),
                seconds=row["seconds"],
                reused=bool(row.get("reused")),
            )
        for row in early:
            self.log.write("synth_candidate", step=round_, **row)
        n = len(rows) + len(early)
        ms = [metrics(d) for d in accepted]
        noops = [
            r["noop_score"]
            for r in rows
            if r["status"] == "accepted" and r.get("noop_score") is not None
        ]
        summary = {
            "round": round_,
            "candidates": n,
            "accepted": len(accepted),
            "rejected": n - len(accepted),
            "acceptance_rate": round(len(accepted) / n, 4) if n else 0.0,
            "median_steps": _median([m["steps"] for m in ms]),
            "median_solution_lines": _median([m["solution_lines"] for m in ms]),
            "median_commands": _median([m["commands"] for m in ms]),
            "median_assertions": _median([m["assertions"] for m in ms]),
            "median_noop_score": _median(noops),
            "wall_s": round(time.monotonic() - t0, 1),
            "reasons": _reason_counts(rows, early),
        }
        self.table.append(summary)
        self.log.write("synth_round", step=round_, **summary)
        print(
            f"round {round_}: {summary['accepted']}/{n} accepted, median lines "
            f"{summary['median_solution_lines']:g}, commands {summary['median_commands']:g}, "
            f"assertions {summary['median_assertions']:g} ({summary['wall_s']:g} s)",
            file=sys.stderr,
        )
        return accepted

    def _prior(self, task_id: str) -> dict[str, Any] | None:
        """The validation row of a candidate an interrupted run already settled, or None."""
        for p in (self.out / task_id, self.out / "_rejected" / task_id):
            v = p / "validation.json"
            if v.is_file():
                try:
                    row = json.loads(v.read_text())
                except json.JSONDecodeError:
                    shutil.rmtree(p)  # torn: validate again
                    return None
                return {**row, "reused": True}
        return None

    def finish(self, status: str) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        shutil.rmtree(self.out / "_staging", ignore_errors=True)
        total = sum(r["accepted"] for r in self.table)
        grown = sum(r["accepted"] for r in self.table if r["round"] > 0)
        summary = {
            "schema_version": SCHEMA_VERSION,
            "status": status,
            "seed": self.o.seed,
            "rounds": len(self.table) - 1,
            "accepted": total,
            "accepted_after_seeds": grown,
            "candidates": sum(r["candidates"] for r in self.table),
            "wall_s": round(wall, 1),
            "tasks_per_minute": round(60 * total / wall, 2) if wall > 0 else 0.0,
            "jobs": self.o.jobs,
            "executor": self.o.executor,
            "table": self.table,
        }
        write_json_atomic(self.out / "rounds.json", self.table, schema_version=None, status=None)
        (self.out / "rounds.md").write_text(format_table(self.table) + "\n")
        try:
            plot_rounds(self.table, self.out / "rounds.png")
        except ImportError as e:  # matplotlib is a dependency; say so rather than fail the run
            print(f"t1 synth: no plot ({e})", file=sys.stderr)
        write_json_atomic(self.out / "summary.json", summary)
        if status == "complete":
            write_json_atomic(self.out / "DONE.json", summary)
        self.log.close()
        return summary


def _reason_counts(rows: list[dict[str, Any]], early: list[dict[str, Any]]) -> dict[str, int]:
    """Rejections by the first words of their first reason (for the table's footnote)."""
    out: dict[str, int] = {}
    for r in [*rows, *early]:
        if r["status"] == "accepted" or not r["reasons"]:
            continue
        key = r["reasons"][0].split(":")[0][:60]
        out[key] = out.get(key, 0) + 1
    return out


def run(opts: SynthOptions) -> dict[str, Any]:
    """The whole loop; returns the summary (also written to DIR/summary.json)."""
    r = _Run(opts)
    parents = r.round(0, r.seeds(), [])
    for round_ in range(1, opts.rounds + 1):
        if not parents:
            print(f"t1 synth: round {round_ - 1} accepted nothing; stopping", file=sys.stderr)
            return r.finish("stopped")
        drafts, early = r.children(parents, round_)
        parents = r.round(round_, drafts, early)
    return r.finish("complete")


def format_table(table: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(TABLE_KEYS) + " |"
    rule = "|" + "|".join("---" for _ in TABLE_KEYS) + "|"
    rows = [
        "| "
        + " | ".join(f"{r[k]:g}" if isinstance(r[k], float) else str(r[k]) for k in TABLE_KEYS)
        + " |"
        for r in table
    ]
    return "\n".join([head, rule, *rows])


def plot_rounds(table: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in table]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].bar(rounds, [r["accepted"] for r in table], label="accepted", color="tab:green")
    axes[0].bar(
        rounds,
        [r["rejected"] for r in table],
        bottom=[r["accepted"] for r in table],
        label="rejected",
        color="tab:red",
    )
    axes[0].set_title("candidates per round")
    axes[0].legend()
    for key in ("median_solution_lines", "median_commands"):
        axes[1].plot(rounds, [r[key] for r in table], marker="o", label=key.removeprefix("median_"))
    axes[1].set_title("median solution size")
    axes[1].legend()
    for key in ("median_assertions", "median_steps"):
        axes[2].plot(rounds, [r[key] for r in table], marker="o", label=key.removeprefix("median_"))
    axes[2].set_title("median verifier / workflow size")
    axes[2].legend()
    for ax in axes:
        ax.set_xlabel("round")
        ax.set_xticks(rounds)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    write_atomic(path, buf.getvalue())
