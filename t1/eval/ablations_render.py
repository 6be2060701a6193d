"""How `t1 ablations` (t1/eval/ablations.py) shows its table: the Markdown page, and the two figures
(critic warm-up vs cold start, dense vs binary reward) drawn from the rows' `data`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def markdown(
    rows: Sequence[dict[str, Any]],
    title: str,
    plots: Sequence[str] = (),
    base: Path | None = None,
) -> str:
    """The table; sources shown relative to `base` (the results directory) where they lie in it."""

    def shown(s: str) -> str:
        if base is not None and Path(s).is_relative_to(base):
            return str(Path(s).relative_to(base))
        return s

    def cell(x: str) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = [f"# Ablations: {title}", "",
             "| ablation | ours (measured) | paper | shape | holds | why | source |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        src = ", ".join(f"`{shown(s)}`" for s in r["sources"])
        lines.append("| " + " | ".join(cell(x) for x in (
            r["item"], r["measured"], r["paper"], r["shape"], f"**{r['holds']}**", r["why"])) +
            f" | {cell(src)} |")  # fmt: skip
    lines.append("")
    lines.append(
        "Verdicts: (d) and (e) by pooled two-proportion z-tests at p < 0.05 (the intervals and "
        "the paired test beside them); (c) asks its shape of every seed."
    )
    for p in plots:
        lines += ["", f"![{Path(p).stem}]({Path(p).name})"]
    return "\n".join(lines) + "\n"


def plot_critic(row: dict[str, Any], path: Path) -> None:
    """EV per step: each seed's warm and cold curve on the same batches (thin), their mean
    (thick), and the two campaigns' own curves (dotted) when measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 3.8))
    lowest = 0.0
    data = row["data"]
    for arm, color in (("warm", "C0"), ("cold", "C3")):
        series = [s[arm]["explained_variance"] for s in data["seeds"]]
        for ev in series:
            pts = [(i, v) for i, v in enumerate(ev) if v is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), color=color, lw=0.8, alpha=0.4)
                lowest = min(lowest, min(v for _, v in pts))
        mean = []
        for i in range(max(len(e) for e in series)):
            vals = [e[i] for e in series if i < len(e) and e[i] is not None]
            if vals:
                mean.append((i, sum(vals) / len(vals)))
        if mean:
            ax.plot(*zip(*mean, strict=True), "o-", color=color,
                    label=f"{arm} critic, same batches ({len(series)} seeds)")  # fmt: skip
        camp = (data.get("campaign") or {}).get(arm)
        if camp:
            pts = [(i, v) for i, v in enumerate(camp["explained_variance"]) if v is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), ":", color=color, label=f"{arm} campaign")
                lowest = min(lowest, min(v for _, v in pts))
    ax.axhline(0.0, color="k", lw=0.8)
    if lowest < -2:
        ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("PPO step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("explained variance")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("(c) critic warm-up vs cold start", fontsize=10)
    _save(fig, path)


def plot_reward(row: dict[str, Any], path: Path) -> None:
    """Left: training-rollout resolved rate per PPO step, dense and binary. Right: the final
    evaluations with their Wilson 95% intervals (SFT baseline, dense PPO, binary PPO)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, style in (("dense", "o-"), ("binary", "s--")):
        pts = [(p["step"], p["resolved_rate"]) for p in row["data"]["curves"][name]
               if p["resolved_rate"] is not None]  # fmt: skip
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=f"{name} reward")
    ax.set_xlabel("PPO step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("resolved rate, training rollouts")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    final = row["data"]["final"]
    names = ["sft", "dense", "binary"]
    for i, (name, color) in enumerate(zip(names, ("0.4", "C0", "C1"), strict=True)):
        e = final[name]
        r = e["resolved_rate"] or 0.0
        lo, hi = e["ci95"] or (r, r)
        bx.errorbar([i], [r], yerr=[[r - lo], [hi - r]], fmt="o", capsize=6, color=color)
    bx.set_xticks(range(len(names)), ["SFT", "dense PPO", "binary PPO"])
    bx.set_ylabel("resolved rate, final evaluation (95% CI)")
    bx.set_ylim(-0.05, 1.05)
    bx.grid(alpha=0.3)
    fig.suptitle("(d) dense vs binary reward", fontsize=10)
    _save(fig, path)


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
