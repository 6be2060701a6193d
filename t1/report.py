"""`t1 report`: a run's JSON-lines events and evaluations -> report.md with tables and plots.

    t1 report --config workflow/config/tiny.yaml --run-dir results/tiny --out results/tiny/report.md

Reads every `metrics.jsonl` under the run directory (t1.metrics_log events: SFT, critic
warm-up, PPO steps), every `eval.json` (t1 evaluate) and the TITO audit JSON if present,
and writes report.md beside PNG plots (report_*.png): per-step reward, train–inference gap
with its EMA, explained variance, value and policy loss, clip fraction, entropy; a table of
the last PPO step's metrics and one row per evaluation (resolved rate, mean reward).

Each step appears once: of the records a resumed stage wrote again for the steps it redid,
the last attempt's is kept (t1.metrics_log.last_attempt) and the step is marked `(redone)`.
Every `incidents.jsonl` under the run directory (t1.incidents: corrupt checkpoints and the
fallbacks that replaced them, restarted children, orphans killed, stages restarted) is listed
under "Incidents", each distinct record once. Beside it, RUN_DIR/summary.json: resolved rate,
n, 95% interval and pass@k of the SFT and PPO policies on held-out and train-pool tasks
(t1.eval_summary.run_summary; null with a note where the run has no such evaluation).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from t1.incidents import read_incidents
from t1.metrics_log import last_attempt, read_events
from t1.records import write_atomic, write_json_atomic

PLOTS: dict[str, list[str]] = {
    "reward": ["reward_mean", "resolved_rate"],
    "gap": ["gap", "gap_ema"],
    "explained_variance": ["explained_variance"],
    "losses": ["value_loss", "policy_loss"],
    "clip_entropy": ["clip_fraction", "entropy"],
}


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


def _series(events: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, ev in enumerate(events):
        v = ev.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(ev.get("step", i) or i)
            ys.append(float(v))
    return xs, ys


def plot(events: list[dict[str, Any]], out_dir: Path, prefix: str) -> list[Path]:
    """One PNG per group in PLOTS that has data; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, keys in PLOTS.items():
        series = {k: _series(events, k) for k in keys}
        if not any(xs for xs, _ in series.values()):
            continue
        fig, ax = plt.subplots(figsize=(5, 3))
        for k, (xs, ys) in series.items():
            if xs:
                ax.plot(xs, ys, marker="o", label=k)
        ax.set_xlabel("PPO step")
        ax.set_title(name.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{prefix}_{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def render(run_dir: Path, out: Path) -> str:
    events = collect_events(run_dir)
    ppo = events.get("ppo_step", [])
    lines = [f"# Report: {run_dir.name}", ""]
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        reward = json.loads(manifest.read_text()).get("reward")
        if reward:
            lines += [
                f"Reward: `{reward['kind']}`, scale {reward['scale']:g} (fixed for the run).",
                "",
            ]
    lines += ["## Events", "", "| event | steps | redone | sources |", "|---|---|---|---|"]
    for kind, evs in sorted(events.items()):
        sources = sorted({e["_source"].split("/")[0] for e in evs})
        redone = sum(1 for e in evs if e.get("redone"))
        lines.append(f"| {kind} | {len(evs)} | {redone} | {', '.join(sources)} |")
    lines.append("")
    lines += incidents_section(run_dir)
    from t1.tasks.ready import report_section  # tasks the pools excluded as not ready offline

    lines += report_section(run_dir)
    if ppo:
        keys = [
            k
            for k in (
                "step",
                "reward_mean",
                "resolved_rate",
                "gap",
                "gap_ema",
                "explained_variance",
                "value_loss",
                "policy_loss",
                "clip_fraction",
                "entropy",
                "tokens_per_s",
                "step_time_s",
            )
            if any(k in e for e in ppo)
        ]
        lines += ["## PPO steps", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for ev in ppo:
            cells = [_fmt(ev.get(k)) for k in keys]
            if ev.get("redone"):
                cells[0] += " (redone)"
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for path in plot(ppo, out.parent, out.stem):
            lines += [f"![{path.stem}]({path.name})", ""]
    evals = sorted(run_dir.rglob("eval.json"))
    if evals:
        lines += [
            "## Evaluations",
            "",
            "| label | trajectories | resolved | 95% CI (Wilson) | pass@k | mean reward | mean turns |",
            "|---|---|---|---|---|---|---|",
        ]
        for path in evals:
            doc = json.loads(path.read_text())
            o = doc["summary"]["overall"]
            ci = o.get("ci95")  # schema 2 (t1 evaluate --k); None: no trajectory
            rate = "-" if o["resolved_rate"] is None else f"{o['resolved_rate']:.1%}"
            lines.append(
                f"| {doc.get('label', path.parent.name)} | {o['trajectories']} | {rate} | "
                f"{'-' if not ci else f'[{ci[0]:.1%}, {ci[1]:.1%}]'} | "
                f"{_fmt(o.get('pass_at_k'))} (k={doc.get('k', 1)}) | {_fmt(o['mean_reward'])} | "
                f"{_fmt(o['mean_turns'])} |"
            )
        lines += ["", "Per-split figures for scripts: `summary.json` (held-out vs train pool).", ""]
    audits = sorted(run_dir.rglob("tito_audit.json"))
    for path in audits:
        a = json.loads(path.read_text())
        lines += [
            f"## TITO audit ({path.parent.relative_to(run_dir)})",
            "",
            f"trajectories {a.get('trajectories')}, loss tokens {a.get('loss_tokens')}, drift rate "
            f"{a.get('drift_rate')}, placeholder rate {a.get('placeholder_rate')}, placeholders in loss "
            f"{a.get('placeholder_in_loss')}, relations {a.get('relations')}",
            "",
        ]
    return "\n".join(lines)


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


def incidents_section(run_dir: Path) -> list[str]:
    recs = collect_incidents(run_dir)
    lines = ["## Incidents", ""]
    if not recs:
        return lines + ["none", ""]
    lines += [
        "| " + " | ".join(_INCIDENT_KEYS) + " | log |",
        "|" + "---|" * (len(_INCIDENT_KEYS) + 1),
    ]
    for r in recs:
        cells = [_fmt(r.get(k)).replace("|", "/") for k in _INCIDENT_KEYS] + [r["_source"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="campaign config (for the run directory)")
    parser.add_argument("--run-dir", type=Path, help="run directory (default: <results>/<run>)")
    parser.add_argument("--out", type=Path, help="report file (default: RUN_DIR/report.md)")


def main(args: argparse.Namespace) -> int:
    run_dir = args.run_dir
    if run_dir is None:
        if args.config is None:
            raise SystemExit("t1 report: give --config or --run-dir")
        from t1.config import load_config

        cfg = load_config(args.config)
        run_dir = Path(cfg.run.results_dir) / cfg.run.name
    out = args.out or run_dir / "report.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(run_dir, out)
    write_atomic(out, text)
    from t1.eval_summary import run_summary  # RUN_DIR/summary.json: sft/ppo per split, for scripts

    write_json_atomic(run_dir / "summary.json", run_summary(run_dir), indent=2)
    print(f"report: {out}, {run_dir / 'summary.json'}")
    return 0
