"""`t1 report`: a run's JSON-lines events and evaluations -> report.md and report.html with
tables and captioned plots, and summary.json.

    t1 report --config workflow/config/tiny.yaml --run-dir results/tiny --out results/tiny/report.md
    t1 report --run-dir results/tiny --html /tmp/tiny.html     # the page somewhere else

Reads every `metrics.jsonl` under the run directory (t1.store.metrics_log events: SFT, critic
warm-up, PPO steps), every `eval.json` (t1 evaluate) and the TITO audit JSON if present, and
builds one document (t1.eval.report_html.Document) that it writes twice: report.md beside PNG plots
(report_*.png, next to --out; t1/eval/report_markdown.py), and report.html (default: --out with
.html), one self-contained page with the same tables and the plots embedded
(t1/eval/report_html.py).

Plots (t1/eval/report_plots.py), each with a caption saying what a healthy run looks like
(FIGURES): per PPO step, reward, resolved rate of the training rollouts, train–inference gap
with its EMA, explained variance, value and policy loss, clip fraction, entropy, over-sampling
(launched / admitted / dropped, and truncated), TITO drift and placeholder rates; from the
evaluations, the resolved rate of SFT and PPO on held-out and train-pool tasks (summary.json)
and per task category.
Verifier integrity: the rollouts' tampered verifier runs (`verifier_tampered` incidents) and,
per pool (pool/*/manifest.json, t1.curate.pool_hacks), how many verifiers import agent-writable
code and which do-nothing hacks fool which verifiers (t1.synth.hacks).
Tables: the summary, the events, incidents, tasks not ready offline, the PPO steps (metrics;
rollouts and TITO), the evaluations (overall, per category, per task), TITO audits.

Each step appears once: of the records a resumed stage wrote again for the steps it redid,
the last attempt's is kept (t1.store.metrics_log.last_attempt) and the step is marked `(redone)`.
Every `incidents.jsonl` under the run directory (t1.store.incidents: corrupt checkpoints and the
fallbacks that replaced them, restarted children, orphans killed, stages restarted) is listed
under "Incidents", each distinct record once. Beside it, RUN_DIR/summary.json: resolved rate,
n, 95% interval and pass@k of the SFT and PPO policies on held-out, unseen-name held-out
(`heldout_unseen`: family instances named from words no training stage holds) and train-pool
tasks (t1.eval.summary.run_summary; null with a note where the run has no such evaluation).
"""

from __future__ import annotations

import argparse
import json
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
from t1.eval.report_markdown import markdown
from t1.eval.report_plots import plot, plot_categories, plot_eval_resolved
from t1.records import write_atomic, write_json_atomic
from t1.store.incidents import read_incidents
from t1.store.metrics_log import last_attempt, read_events

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
    from t1.eval.summary import REPORTED_SPLITS, STAGES

    rows = []
    for split in REPORTED_SPLITS:
        for stage in STAGES:
            f = summary.get(split, {}).get(stage)
            if not f:
                rows.append([split, stage, "-", "-", "-", "-", "-", "not evaluated"])
                continue
            rows.append([split, stage, _pct(f["resolved"]), _ci(f["ci95"]), str(f["n"]),
                         str(f["tasks"]), f"{_fmt(f['pass_at_k'])} (k={f['k']})", f["source"]])  # fmt: skip
        gap = summary.get(split, {}).get("ppo_vs_sft")
        if gap:
            p = "-" if gap["p"] is None else f"p = {gap['p']:.3g}"
            rows.append([split, "PPO - SFT", f"{gap['points']:+.1f} points", p, "", "", "",
                         gap["test"]])  # fmt: skip
            paired = gap.get("paired")
            if paired:
                rows.append([split, "PPO - SFT, paired", f"{paired['ppo_only']} PPO only, "
                             f"{paired['sft_only']} SFT only", f"p = {paired['p']:.3g}", "",
                             str(paired["tasks"]), "", paired["test"]])  # fmt: skip
    header = ["split", "stage", "resolved", "95% CI (Wilson)", "trajectories", "tasks", "pass@k",
              "source"]  # fmt: skip
    blocks: list[Block] = [
        Table(header, rows),
        Para(
            ["Splits: ", Code("train"), " = tasks of the train pool; ", Code("heldout"),
             " = tasks never trained on, named with words the training stages use; ",
             Code("heldout_unseen"), " = family tasks whose every name is a word that no "
             "training stage (tokenizer corpus, pre-training, SFT, PPO) ever held: whether "
             "the policy copies a name from the instruction rather than recall one."]
        ),
    ]  # fmt: skip
    fam_table = family_table(summary)
    if fam_table is not None:
        blocks += [
            Para(["Per task family, resolved of run, SFT → PPO (a family that collapses while "
                  "the split's total holds shows here):"]),
            fam_table,
        ]  # fmt: skip
    if summary.get("notes"):
        blocks.append(Bullets([Para([n]) for n in summary["notes"]]))
    if figure:
        blocks.append(figure)
    return Section("Summary", blocks)


def family_table(summary: dict[str, Any]) -> Table | None:
    """Family x split, "SFT k/n → PPO k/n" (summary.json's `by_family`); None without any."""
    from t1.eval.summary import REPORTED_SPLITS, STAGES

    cells: dict[str, dict[str, str]] = {}
    for split in REPORTED_SPLITS:
        for stage in STAGES:
            f = summary.get(split, {}).get(stage) or {}
            for fam, c in (f.get("by_family") or {}).items():
                cells.setdefault(fam, {}).setdefault(split, {})[stage] = (
                    f"{c['resolved_count']}/{c['n']}"
                )
    if not cells:
        return None
    rows = [
        [fam] + [" → ".join(cells[fam].get(sp, {}).get(st, "-") for st in STAGES)
                 for sp in REPORTED_SPLITS]
        for fam in sorted(cells)
    ]  # fmt: skip
    return Table(["family", *REPORTED_SPLITS], rows)


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


def integrity_section(run_dir: Path) -> Section:
    """Tampered verifier runs (incidents) and, per pool, hackable verifiers (manifests)."""
    tampered = [r for r in collect_incidents(run_dir) if r.get("kind") == "verifier_tampered"]
    blocks: list[Block] = [
        Para([f"Tampered verifier runs (scored as the no-op): {len(tampered)}."])
    ]
    rows: list[list[str]] = []
    for m in sorted(Path(run_dir).glob("pool/*/manifest.json")):
        try:
            man = json.loads(m.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        c = man.get("counts", {})
        if "imports_agent_code" not in c:
            continue
        blocks.append(Para(["Pool ", Code(m.parent.name), f": {c['imports_agent_code']} of "
                            f"{c.get('kept', len(man.get('tasks', [])))} verifiers import "
                            f"agent-writable code, {c.get('hack_checked', 0)} checked against "
                            f"the hacks, {c.get('hackable', 0)} hackable."]))  # fmt: skip
        for h in man.get("hackable") or []:
            sc = h.get("scores") or {}
            rows.append([m.parent.name, str(h["id"]), ", ".join(h.get("hacks") or []),
                         _fmt(sc.get("noop")),
                         ", ".join(f"{k} {_fmt(v)}" for k, v in sc.items() if k != "noop")])  # fmt: skip
    if rows:
        blocks.append(Table(["pool", "task", "hackable by", "no-op score", "hack scores"], rows))
    return Section("Verifier integrity", blocks)


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
            [
                "Per-split figures for scripts: ",
                Code("summary.json"),
                " (held-out, unseen-name held-out, train pool).",
            ]
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
    sections += [events_section(events), incidents_section(run_dir), integrity_section(run_dir)]
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
