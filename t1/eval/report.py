"""`t1 report`: a run's JSON-lines events and evaluations -> report.md and report.html with
tables and captioned plots, and summary.json.

    t1 report --config workflow/config/tiny.yaml --run-dir results/tiny --out results/tiny/report.md
    t1 report --run-dir results/tiny --html /tmp/tiny.html     # the page somewhere else

Reads every `metrics.jsonl` under the run directory (t1.store.metrics_log events: SFT, critic
warm-up, PPO steps), every `eval.json` (t1 evaluate) and the TITO audit JSON if present, and
builds one document (t1.eval.report_html.Document) that it writes twice: report.md beside PNG plots
(report_*.png, next to --out), and report.html (default: --out with .html), one self-contained
page with the same tables and the plots embedded (t1/eval/report_html.py).

Plots, each with a caption saying what a healthy run looks like (FIGURES): per PPO step,
reward, resolved rate of the training rollouts, train–inference gap with its EMA, explained
variance, value and policy loss, clip fraction, entropy, over-sampling (launched / admitted /
dropped, and truncated), TITO drift and placeholder rates; from the evaluations, the resolved
rate of SFT and PPO on held-out and train-pool tasks (summary.json) and per task category.
Tables: the summary, the events, incidents, tasks not ready offline, the PPO steps (metrics;
rollouts and TITO), the evaluations (overall, per category, per task), TITO audits.

Each step appears once: of the records a resumed stage wrote again for the steps it redid,
the last attempt's is kept (t1.store.metrics_log.last_attempt) and the step is marked `(redone)`.
Every `incidents.jsonl` under the run directory (t1.store.incidents: corrupt checkpoints and the
fallbacks that replaced them, restarted children, orphans killed, stages restarted) is listed
under "Incidents", each distinct record once. Beside it, RUN_DIR/summary.json: resolved rate,
n, 95% interval and pass@k of the SFT and PPO policies on held-out and train-pool tasks
(t1.eval.summary.run_summary; null with a note where the run has no such evaluation).
"""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.eval.report_html import (
    Block,
    Bullets,
    Code,
    Document,
    Figure,
    Para,
    Section,
    Table,
    to_html,
)
from t1.records import write_atomic, write_json_atomic
from t1.store.incidents import read_incidents
from t1.store.metrics_log import last_attempt, read_events


@dataclass(frozen=True)
class Plot:
    """A plot of the report: its file suffix, title, the fields drawn, what a healthy run shows."""

    name: str
    title: str
    keys: tuple[str, ...]
    caption: str
    ylabel: str = ""
    ylim: tuple[float | None, float | None] = (None, None)  # None: matplotlib's choice


# Per PPO step, from the ppo_step events (t1/train/step.py, t1/train/data.py).
STEP_PLOTS: tuple[Plot, ...] = (
    Plot("reward", "Reward", ("reward_mean",),
         "Mean reward of the step's training trajectories. Healthy: trends upward over the steps "
         "(noisy from step to step); flat at its first value means PPO is not learning, a "
         "sustained drop is a regression.", "mean reward"),
    Plot("resolved_rate", "Resolved rate, training rollouts (train pool)", ("resolved_rate",),
         "Share of the step's training trajectories that resolved their task. Healthy: rises "
         "with the reward; stuck at 0 means the policy never reaches a full solve and learns "
         "from partial credit only.", "resolved", (0.0, 1.05)),
    Plot("gap", "Train–inference gap", ("gap", "gap_ema"),
         "Mean |log p(train) - log p(inference)| over the loss tokens, and its EMA. Healthy: "
         "the gap EMA stays near 0 and flat; a rising gap means train and inference diverge "
         "(weights out of sync, numerics, routing mismatch).", "|Δ log p|", (0.0, None)),
    Plot("explained_variance", "Explained variance (critic)", ("explained_variance",),
         "1 - Var(returns - values) / Var(returns). Healthy: above 0 after the critic warm-up "
         "and climbing towards 1; at or below 0 the critic predicts no better than a constant "
         "and the advantages are noise.", "explained variance"),
    Plot("losses", "Value and policy loss", ("value_loss", "policy_loss"),
         "Healthy: the value loss falls and settles; the policy loss stays small around 0 "
         "without spikes (absent on critic-only steps).", "loss"),
    Plot("clip_fraction", "Clip fraction", ("clip_fraction",),
         "Share of loss tokens whose probability ratio hit the PPO clip. Healthy: small and "
         "steady (about 0.01-0.2); near 0 the actor barely moves, above ~0.3 the updates are "
         "too large (lower the learning rate). Absent on critic-only steps.", "fraction", (0.0, None)),
    Plot("entropy", "Entropy", ("entropy",),
         "Mean token entropy of the policy on its samples. Healthy: declines slowly; a fast "
         "collapse towards 0 means the policy stopped exploring, a rise that it turns random.",
         "nats"),
    Plot("oversampling", "Over-sampling: trajectories per step",
         ("oversampling_launched", "oversampling_admitted", "oversampling_dropped", "truncated"),
         "Launched, admitted into the batch, dropped (the slowest, cut once the batch was full), "
         "and admitted ones TRUNCATED at the turn/token limit. Healthy: admitted flat at the "
         "batch size, dropped steady, truncated a small share; dropped or truncated growing "
         "means episodes get longer or stuck.", "trajectories", (0.0, None)),
    Plot("tito", "TITO: drift and placeholder rates", ("drift_rate", "placeholder_rate"),
         "Drift: share of loss tokens where the training token stream differs from what "
         "inference sampled; placeholders: share of positions without captured routing. "
         "Healthy: drift exactly 0, placeholder rate small and flat; placeholders_in_loss "
         "(table) must be 0.", "rate", (0.0, None)),
)  # fmt: skip
EVAL_RESOLVED = Plot(
    "eval_resolved", "Resolved rate: held-out vs train pool", ("resolved",),
    "SFT and PPO policies evaluated by t1 evaluate, 95% Wilson interval as error bars "
    "(summary.json). Healthy: PPO at or above SFT on held-out tasks; a gain on the train pool "
    "alone means PPO fits the pool without generalising.", "resolved rate",
)  # fmt: skip
CATEGORIES = Plot(
    "categories", "Resolved rate per task category", ("resolved_rate",),
    "Each evaluation's resolved rate per category (95% Wilson interval). Healthy: PPO at or "
    "above SFT in every category; a category where PPO falls below SFT is a regression, one "
    "at 0 for both is out of the policy's reach.", "resolved rate",
)  # fmt: skip
FIGURES: dict[str, Plot] = {p.name: p for p in (*STEP_PLOTS, EVAL_RESOLVED, CATEGORIES)}

STEP_KEYS = ("step", "reward_mean", "resolved_rate", "gap", "gap_ema", "explained_variance",
             "value_loss", "policy_loss", "clip_fraction", "entropy", "tokens_per_s",
             "step_time_s")  # fmt: skip
ROLLOUT_KEYS = ("step", "oversampling_launched", "oversampling_admitted", "oversampling_dropped",
                "truncated", "drift_rate", "placeholder_rate", "placeholders_in_loss")  # fmt: skip


def collect_events(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Events by kind, from every metrics.jsonl under `run_dir`, ordered by (step, time)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(run_dir.rglob("metrics.jsonl")):
        for ev in last_attempt(read_events(path)):
            ev = dict(ev, _source=str(path.relative_to(run_dir)))
            by_kind.setdefault(str(ev.get("event")), []).append(ev)
    for evs in by_kind.values():
        evs.sort(key=lambda e: (e.get("step") or 0, e.get("time") or 0))
    return by_kind


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _series(events: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, ev in enumerate(events):
        v = ev.get(key)
        if _number(v):
            xs.append(ev.get("step", i) or i)
            ys.append(float(v))
    return xs, ys


# --------------------------------------------------------------------------- plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(s: str) -> str:
    """Text for matplotlib as written: a `$` would start mathtext."""
    return str(s).replace("$", r"\$")


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    _pyplot().close(fig)
    write_atomic(path, buf.getvalue())
    return path


def _figure(plot: Plot, path: Path) -> Figure:
    return Figure(path=path, title=plot.title, caption=plot.caption)


def plot(events: list[dict[str, Any]], out_dir: Path, prefix: str) -> list[Figure]:
    """One PNG per STEP_PLOTS entry that has data (OUT_DIR/PREFIX_NAME.png); their Figures."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    written = []
    steps = sorted({x for p in STEP_PLOTS for k in p.keys for x in _series(events, k)[0]})
    for p in STEP_PLOTS:
        series = {k: _series(events, k) for k in p.keys}
        if not any(xs for xs, _ in series.values()):
            continue
        fig, ax = plt.subplots(figsize=(5.6, 3.2))
        for k, (xs, ys) in series.items():
            if xs:
                ax.plot(xs, ys, marker="o", label=k)
        ax.set_xlabel("PPO step")
        ax.set_ylabel(p.ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(steps[0] - 0.3, steps[-1] + 0.3)  # every plot spans every step
        lo, hi = p.ylim
        if lo is not None and all(y >= lo for _, ys in series.values() for y in ys):
            ax.set_ylim(bottom=lo)
        if hi is not None and all(y <= hi for _, ys in series.values() for y in ys):
            ax.set_ylim(top=hi)
        ax.set_title(p.title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_figure(p, _save(fig, out_dir / f"{prefix}_{p.name}.png")))
    return written


def _bars(groups: list[str], series: dict[str, list[tuple[float, list[float] | None] | None]],
          plot_: Plot, path: Path, xlabel: str) -> Figure:  # fmt: skip
    """Grouped bars: per group, one bar per series (rate, [lo, hi] or None); None: no bar."""
    plt = _pyplot()
    n = max(1, len(series))
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(min(11.0, max(5.6, 1.0 + 0.45 * len(groups) * n)), 3.4))
    for i, (name, vals) in enumerate(series.items()):
        xs, ys, lo, hi = [], [], [], []
        for g, v in enumerate(vals):
            if v is None:
                ax.text(g + (i - (n - 1) / 2) * width, 0.02, "n/a", ha="center", fontsize=7,
                        rotation=90, color="0.4")  # fmt: skip
                continue
            rate, ci = v
            xs.append(g + (i - (n - 1) / 2) * width)
            ys.append(rate)
            lo.append(rate - ci[0] if ci else 0.0)
            hi.append(ci[1] - rate if ci else 0.0)
        bars = ax.bar(xs, ys, width=width * 0.95, label=_label(name), yerr=[lo, hi], capsize=3)
        ax.bar_label(bars, labels=[f"{y:.0%}" for y in ys], fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([_label(g) for g in groups], rotation=25 if len(groups) > 3 else 0,
                       ha="right" if len(groups) > 3 else "center", fontsize=8)  # fmt: skip
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(plot_.ylabel)
    ax.set_xlabel(xlabel)
    ax.set_title(plot_.title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars
    return _figure(plot_, _save(fig, path))


def plot_eval_resolved(summary: dict[str, Any], out_dir: Path, prefix: str) -> Figure | None:
    """Bars of summary.json: held-out and train pool, SFT and PPO; None when all are null."""
    from t1.eval.summary import SPLITS, STAGES

    if not any(summary.get(sp, {}).get(st) for sp in SPLITS for st in STAGES):
        return None
    series = {
        stage: [
            (f["resolved"], f["ci95"]) if (f := summary[sp].get(stage)) else None for sp in SPLITS
        ]
        for stage in STAGES
    }
    groups = ["held-out" if sp == "heldout" else "train pool" for sp in SPLITS]
    return _bars(groups, series, EVAL_RESOLVED, out_dir / f"{prefix}_{EVAL_RESOLVED.name}.png",
                 "tasks")  # fmt: skip


def plot_categories(evals: list[tuple[str, dict]], out_dir: Path, prefix: str) -> Figure | None:
    """Bars per task category, one per evaluation; None when no evaluation has categories."""
    cats = sorted({c for _, doc in evals for c in doc["summary"].get("by_category", {})})
    if not cats:
        return None
    series = {}
    for label, doc in evals:
        by = doc["summary"].get("by_category", {})
        series[label] = [
            (b["resolved_rate"], b.get("ci95"))
            if (b := by.get(c)) and b.get("resolved_rate") is not None
            else None
            for c in cats
        ]
    return _bars(cats, series, CATEGORIES, out_dir / f"{prefix}_{CATEGORIES.name}.png",
                 "category")  # fmt: skip


# --------------------------------------------------------------------------- the document


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:.1%}, {ci[1]:.1%}]"


def summary_section(summary: dict[str, Any], figure: Figure | None) -> Section:
    """summary.json as a table (split x stage), its notes, and the resolved-rate bars."""
    from t1.eval.summary import SPLITS, STAGES

    rows = []
    for split in SPLITS:
        for stage in STAGES:
            f = summary.get(split, {}).get(stage)
            if not f:
                rows.append([split, stage, "-", "-", "-", "-", "-", "not evaluated"])
                continue
            rows.append([split, stage, _pct(f["resolved"]), _ci(f["ci95"]), str(f["n"]),
                         str(f["tasks"]), f"{_fmt(f['pass_at_k'])} (k={f['k']})", f["source"]])  # fmt: skip
    header = ["split", "stage", "resolved", "95% CI (Wilson)", "trajectories", "tasks", "pass@k",
              "source"]  # fmt: skip
    blocks: list[Block] = [Table(header, rows)]
    if summary.get("notes"):
        blocks.append(Bullets([Para([n]) for n in summary["notes"]]))
    if figure:
        blocks.append(figure)
    return Section("Summary", blocks)


def events_section(events: dict[str, list[dict[str, Any]]]) -> Section:
    rows = []
    for kind, evs in sorted(events.items()):
        sources = sorted({e["_source"].split("/")[0] for e in evs})
        redone = sum(1 for e in evs if e.get("redone"))
        rows.append([kind, str(len(evs)), str(redone), ", ".join(sources)])
    return Section("Events", [Table(["event", "steps", "redone", "sources"], rows)])


def collect_incidents(run_dir: Path) -> list[dict[str, Any]]:
    """Every distinct incident record under `run_dir` (the same record reached through two
    logs, or reported again by a later attempt, once), oldest first, with `_source`."""
    seen: set[str] = set()
    out = []
    for path in sorted(run_dir.rglob("incidents.jsonl")):
        for rec in read_incidents(path):
            key = json.dumps(
                {k: v for k, v in rec.items() if k not in ("time", "attempt")},
                sort_keys=True,
                default=str,
            )
            if key in seen:
                continue
            seen.add(key)
            out.append(dict(rec, _source=str(path.relative_to(run_dir))))
    return sorted(out, key=lambda r: r.get("time") or 0)


_INCIDENT_KEYS = ("kind", "attempt", "step", "path", "child", "problem", "error", "action")


def incidents_section(run_dir: Path) -> Section:
    recs = collect_incidents(run_dir)
    if not recs:
        return Section("Incidents", [Para(["none"])])
    rows = [[_fmt(r.get(k)) for k in _INCIDENT_KEYS] + [r["_source"]] for r in recs]
    return Section("Incidents", [Table([*_INCIDENT_KEYS, "log"], rows)])


def not_ready_section(run_dir: Path) -> Section | None:
    """Per pool, the tasks excluded as not ready offline (pool/*/manifest.json `offline`, as
    t1.tasks.ready writes it): the count, then each task with what it misses."""
    blocks: list[Block] = []
    for m in sorted(Path(run_dir).glob("pool/*/manifest.json")):
        try:
            off = json.loads(m.read_text()).get("offline")
        except (OSError, json.JSONDecodeError):
            continue
        if not off:
            continue
        blocks.append(Para(["Pool ", Code(m.parent.name), f": {off['not_ready_count']} of "
                            f"{off['checked']} tasks not ready (sandbox.network: "
                            f"{off['network']})."]))  # fmt: skip
        if off["not_ready"]:
            rows = [[str(r["task"]), "; ".join(r["missing"])] for r in off["not_ready"]]
            blocks.append(Table(["task", "missing"], rows))
    if not blocks:
        return None
    return Section("Tasks not ready offline (excluded from the pools, not scored)", blocks)


def _step_table(ppo: list[dict[str, Any]], keys: tuple[str, ...]) -> Table | None:
    keys = tuple(k for k in keys if any(k in e for e in ppo))
    if len(keys) < 2:  # the step alone
        return None
    rows = []
    for ev in ppo:
        cells = [_fmt(ev.get(k)) for k in keys]
        if ev.get("redone"):
            cells[0] += " (redone)"
        rows.append(cells)
    return Table(list(keys), rows)


def ppo_sections(ppo: list[dict[str, Any]], out: Path) -> list[Section]:
    """The per-step metrics table (first under its heading: scripts read it), the rollouts and
    TITO table, then the plots."""
    metrics = _step_table(ppo, STEP_KEYS)
    rollouts = _step_table(ppo, ROLLOUT_KEYS)
    figures: list[Block] = list(plot(ppo, out.parent, out.stem))
    sections = [Section("PPO steps", [metrics] if metrics else [])]
    if rollouts:
        sections.append(Section("Rollouts and TITO per step", [rollouts], level=3))
    if figures:
        sections.append(Section("Plots per PPO step", figures, level=3))
    return sections


def load_evals(run_dir: Path) -> list[tuple[str, dict[str, Any], Path]]:
    """(label, document, path) of every eval.json under the run directory, by path."""
    out = []
    from t1.eval.summary import STAGES

    def order(path: Path) -> tuple[int, str]:  # sft, ppo, then any other, each by path
        name = path.parent.name
        return (STAGES.index(name) if name in STAGES else len(STAGES), str(path))

    for path in sorted(run_dir.rglob("eval.json"), key=order):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"t1 report: {path}: not a readable eval.json ({e})") from None
        out.append((str(doc.get("label") or path.parent.name), doc, path))
    return out


def evaluations_section(evals: list[tuple[str, dict[str, Any], Path]], out: Path) -> Section:
    rows = []
    for label, doc, _ in evals:
        o = doc["summary"]["overall"]
        rows.append([label, str(o["trajectories"]), _pct(o["resolved_rate"]), _ci(o.get("ci95")),
                     f"{_fmt(o.get('pass_at_k'))} (k={doc.get('k', 1)})", _fmt(o["mean_reward"]),
                     _fmt(o["mean_turns"])])  # fmt: skip
    header = ["label", "trajectories", "resolved", "95% CI (Wilson)", "pass@k", "mean reward",
              "mean turns"]  # fmt: skip
    blocks: list[Block] = [
        Table(header, rows),
        Para(
            ["Per-split figures for scripts: ", Code("summary.json"), " (held-out vs train pool)."]
        ),
    ]
    cat_rows = []
    for i, (label, doc, _) in enumerate(evals):
        for cat, b in doc["summary"].get("by_category", {}).items():
            cat_rows.append((cat, i, [cat, label, str(b["trajectories"]), str(b["resolved"]),
                                      _pct(b["resolved_rate"]), _ci(b.get("ci95"))]))  # fmt: skip
    cat_rows = [row for _, _, row in sorted(cat_rows, key=lambda r: r[:2])]
    if cat_rows:
        blocks.append(Table(["category", "label", "trajectories", "resolved", "rate",
                             "95% CI (Wilson)"], cat_rows))  # fmt: skip
    fig = plot_categories([(label, doc) for label, doc, _ in evals], out.parent, out.stem)
    if fig:
        blocks.append(fig)
    tasks: dict[str, dict[str, Any]] = {}
    for label, doc, _ in evals:
        for t in doc.get("tasks") or []:
            row = tasks.setdefault(str(t["task"]), {"category": t.get("category"),
                                                    "difficulty": t.get("difficulty")})  # fmt: skip
            row[label] = f"{t.get('resolved')}/{t.get('runs')}"
    if tasks:
        labels = [label for label, _, _ in evals]
        rows = [[tid, _fmt(r["category"]), _fmt(r["difficulty"]), *(r.get(la, "-") for la in labels)]
                for tid, r in sorted(tasks.items())]  # fmt: skip
        header = ["task", "category", "difficulty", *(f"{la} resolved/runs" for la in labels)]
        blocks.append(Para(["Per task:"]))
        blocks.append(Table(header, rows, collapsed=len(rows) > 15))
    return Section("Evaluations", blocks)


def audit_sections(run_dir: Path) -> list[Section]:
    out = []
    for path in sorted(run_dir.rglob("tito_audit.json")):
        a = json.loads(path.read_text())
        out.append(Section(f"TITO audit ({path.parent.relative_to(run_dir)})", [Para([
            f"trajectories {a.get('trajectories')}, loss tokens {a.get('loss_tokens')}, drift rate "
            f"{a.get('drift_rate')}, placeholder rate {a.get('placeholder_rate')}, placeholders in "
            f"loss {a.get('placeholder_in_loss')}, relations {a.get('relations')}"])]))  # fmt: skip
    return out


def build(run_dir: Path, out: Path, summary: dict[str, Any] | None = None) -> Document:
    """The report of `run_dir` as a Document; writes its PNG plots next to `out` (named after
    out's stem). `summary`: run_summary(run_dir), computed here when not given."""
    from t1.eval.summary import run_summary

    if summary is None:
        summary = run_summary(run_dir)
    events = collect_events(run_dir)
    intro: list[Block] = []
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        reward = json.loads(manifest.read_text()).get("reward")
        if reward:
            intro.append(Para(["Reward: ", Code(str(reward["kind"])),
                               f", scale {reward['scale']:g} (fixed for the run)."]))  # fmt: skip
    sections = [summary_section(summary, plot_eval_resolved(summary, out.parent, out.stem))]
    sections += [events_section(events), incidents_section(run_dir)]
    ready = not_ready_section(run_dir)
    if ready:
        sections.append(ready)
    ppo = events.get("ppo_step", [])
    if ppo:
        sections += ppo_sections(ppo, out)
    evals = load_evals(run_dir)
    if evals:
        sections.append(evaluations_section(evals, out))
    sections += audit_sections(run_dir)
    return Document(f"Report: {run_dir.name}", sections, intro)


# --------------------------------------------------------------------------- Markdown


def _md_inline(p: Para) -> str:
    return "".join(f"`{x.text}`" if isinstance(x, Code) else x for x in p.parts)


def _md_cell(s: str) -> str:
    return str(s).replace("|", "/").replace("\n", " ")


def markdown(doc: Document) -> str:
    """The Document as Markdown; figures by file name (the PNGs lie next to the report)."""
    lines = [f"# {doc.title}", ""]

    def blocks(bs: list[Block]) -> None:
        for b in bs:
            if isinstance(b, Para):
                lines.extend([_md_inline(b), ""])
            elif isinstance(b, Bullets):
                lines.extend([f"- {_md_inline(p)}" for p in b.items] + [""])
            elif isinstance(b, Table):
                lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
                lines.append("|" + "---|" * len(b.header))
                lines.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows)
                lines.append("")
            elif isinstance(b, Figure):
                lines.extend(
                    [f"![{b.path.stem}]({b.path.name})", "", f"*{b.title}.* {b.caption}", ""]
                )

    blocks(doc.intro)
    for s in doc.sections:
        lines += ["#" * s.level + " " + s.title, ""]
        blocks(s.blocks)
    return "\n".join(lines)


def render(run_dir: Path, out: Path) -> str:
    """report.md's text for `run_dir` (plots written next to `out`)."""
    return markdown(build(run_dir, out))


# --------------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="campaign config (for the run directory)")
    parser.add_argument("--run-dir", type=Path, help="run directory (default: <results>/<run>)")
    parser.add_argument("--out", type=Path, help="report file (default: RUN_DIR/report.md)")
    parser.add_argument(
        "--html", type=Path, help="self-contained HTML page (default: --out with .html)"
    )
    parser.add_argument(
        "--shared-run-dir",
        type=Path,
        help="the run whose train pool and SFT evaluation this run shares (an ablation arm)",
    )


def main(args: argparse.Namespace) -> int:
    run_dir = args.run_dir
    if run_dir is None:
        if args.config is None:
            raise SystemExit("t1 report: give --config or --run-dir")
        from t1.config import load_config

        cfg = load_config(args.config)
        run_dir = Path(cfg.run.results_dir) / cfg.run.name
    out = args.out or run_dir / "report.md"
    page = getattr(args, "html", None) or out.with_suffix(".html")
    out.parent.mkdir(parents=True, exist_ok=True)
    page.parent.mkdir(parents=True, exist_ok=True)
    from t1.eval.summary import run_summary  # RUN_DIR/summary.json: sft/ppo per split, for scripts

    summary = run_summary(run_dir, shared=getattr(args, "shared_run_dir", None))
    doc = build(run_dir, out, summary)
    write_atomic(out, markdown(doc))
    write_atomic(page, to_html(doc))
    write_json_atomic(run_dir / "summary.json", summary, indent=2)
    print(f"report: {out}, {page}, {run_dir / 'summary.json'}")
    return 0
