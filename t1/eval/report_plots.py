"""The plots of `t1 report`: what each one draws and the caption saying what a healthy run
looks like (FIGURES), and the code that draws them into PNG files.

    from t1.eval.report_plots import FIGURES, plot, plot_categories, plot_eval_resolved
    figures = plot(ppo_step_events, Path("results/tiny"), "report")   # report_reward.png, ...

Per PPO step (STEP_PLOTS, from the ppo_step events): reward, resolved rate, train–inference
gap, explained variance, losses, clip fraction, entropy, over-sampling, TITO rates. From the
evaluations: resolved rate of SFT and PPO on held-out and train-pool tasks (EVAL_RESOLVED, from
summary.json) and per task category (CATEGORIES). Each PNG is written atomically
(t1.records.write_atomic) and comes back as a report_html.Figure with its title and caption.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.eval.report_html import Figure
from t1.records import write_atomic


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
    """Bars of summary.json: held-out, unseen names and train pool, SFT and PPO; None when all
    are null."""
    from t1.eval.summary import REPORTED_SPLITS as SPLITS
    from t1.eval.summary import STAGES

    if not any((summary.get(sp) or {}).get(st) for sp in SPLITS for st in STAGES):
        return None
    series = {
        stage: [
            (f["resolved"], f["ci95"]) if (f := (summary.get(sp) or {}).get(stage)) else None
            for sp in SPLITS
        ]
        for stage in STAGES
    }
    label = {"heldout": "held-out", "heldout_unseen": "unseen names", "train": "train pool"}
    groups = [label[sp] for sp in SPLITS]
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
