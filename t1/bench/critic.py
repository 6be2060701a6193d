"""Critic warm-up vs cold start: explained-variance curves of the same PPO steps, side by side.

    python -m t1.bench.critic --config results/tiny/config.yaml \\
        --sft results/tiny/sft/model --critic results/tiny/critic/warmup \\
        --tokenizer results/tiny/tokenizer --tasks workflow/tasks \\
        --generate 8 --work /tmp/t1-bench-critic \\
        --json /tmp/t1-bench-critic/critic.json --plot /tmp/t1-bench-critic/critic_ev.png
    python -m t1.bench.critic --config ... --sft ... --critic ... --rollouts DIR [DIR ...] \\
        --work DIR --json FILE          # batches already on disk, one directory per step
    python -m t1.bench.critic --metrics warm=RUN_A/ppo/steps cold=RUN_B/ppo/steps \\
        --json FILE [--plot FILE]       # curves of finished campaigns (their metrics.jsonl)

Two arms start from one SFT policy (--sft, a `t1 train --stage sft` DIR) and run the same
sequence of PPO steps, each step exactly what `t1 train --stage ppo` does (t1.train.ppo: its
`_fresh` builds the trainer, `campaign_step` does the step):

  warm  the critic loaded from --critic (a critic_warmup DIR); its first
        `critic_warmup.recalibration_rollouts` steps (2) update the critic only, then policy
        steps begin - the dense campaign's start;
  cold  the critic built from the policy's backbone with a fresh value head; policy steps
        from step 0 - the comparison the paper draws (cold EV opens at -33.6 and is negative
        for 30 of 58 steps; warmed never negative, plateau 0.71-0.86).

Simplification, on purpose: the rollout batches are FIXED. Batch i is generated once, by the
SFT policy (`t1 rollout --policy SFT/actor --seed SEED_BASE+i`, launch/admit from the config,
tasks cycled from --tasks), and both arms train on the same batch at step i. So the two curves
differ only by the critic's start, not by sampling noise; the price is that the data stay
on-policy for the SFT policy only (the actor's updates never reach the data). With gamma =
lambda = 1 the returns are each row's reward whatever the values, so the critic's curve
depends on the actor only through the minibatch shuffles they share. The explained variance
is the trainer's own (t1.ppo.metrics.explained_variance): the critic's values BEFORE its
update on the batch, against that batch's returns, pooled over loss tokens; null when every
row of a batch has the same reward.

Work directory: WORK/batches/batch_NN (generated rollouts; an existing rollout.json is
reused), WORK/<arm>/metrics.jsonl (the `ppo_step` events, as the stage writes them),
WORK/<arm>/curve.json (an arm whose curve.json matches the batches is not rerun). The JSON
(--json) holds both series, per-batch reward statistics, a summary per arm (where it opens,
steps negative, minimum, the last value) and the paper's figures; the PNG (--plot) draws both
curves, the warm arm's re-calibration steps shaded.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from t1.records import json_safe, write_json_atomic

SCHEMA_VERSION = 1
ARMS = ("warm", "cold")
PAPER = {
    "cold": {"opens_at": -33.6, "negative_steps": 30, "steps": 58},
    "warm": {"negative_steps": 0, "plateau": [0.71, 0.86]},
}


# ------------------------------------------------------------------ curves (pure)


def ev_curve(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`ppo_step` events -> one point per step, ordered by step: {"step", "explained_variance"
    (float or None), "value_loss", "actor_updated", "reward_mean", "v0" (value_stats, if
    logged)}. Other events are ignored;
    a step logged twice (a resumed run) keeps its last event; a null or non-finite EV is None."""
    by_step: dict[int, dict[str, Any]] = {}
    for ev in events:
        if ev.get("event") != "ppo_step":
            continue
        by_step[int(ev["step"])] = ev
    out = []
    for step in sorted(by_step):
        ev = by_step[step]
        out.append(
            {
                "step": step,
                "explained_variance": _finite(ev.get("explained_variance")),
                "value_loss": _finite(ev.get("value_loss")),
                "actor_updated": ev.get("actor_updated"),
                "reward_mean": _finite(ev.get("reward_mean")),
                "v0": ev.get("v0"),
            }
        )
    return out


def summarize(ev: Sequence[float | None]) -> dict[str, Any]:
    """Where a curve opens and how long it stays negative. `ev`: one value per step, None
    where undefined (equal rewards). Keys: opens_at (first defined value), opens_step,
    negative_steps (count of defined values < 0), defined_steps, first_nonnegative_step
    (None if never), last_negative_step (None if never), min, max, last (last defined)."""
    defined = [(i, v) for i, v in enumerate(ev) if v is not None]
    negative = [i for i, v in defined if v < 0]
    nonneg = [i for i, v in defined if v >= 0]
    return {
        "opens_at": defined[0][1] if defined else None,
        "opens_step": defined[0][0] if defined else None,
        "negative_steps": len(negative),
        "defined_steps": len(defined),
        "steps": len(ev),
        "first_nonnegative_step": nonneg[0] if nonneg else None,
        "last_negative_step": negative[-1] if negative else None,
        "min": min((v for _, v in defined), default=None),
        "max": max((v for _, v in defined), default=None),
        "last": defined[-1][1] if defined else None,
    }


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def reward_stats(rewards: Sequence[float]) -> dict[str, Any]:
    """Rows, mean, population std, and how many rows have a non-zero reward."""
    n = len(rewards)
    mean = sum(rewards) / n if n else math.nan
    var = sum((r - mean) ** 2 for r in rewards) / n if n else math.nan
    return {
        "rows": n,
        "reward_mean": mean,
        "reward_std": math.sqrt(var) if n else math.nan,
        "nonzero": sum(1 for r in rewards if r != 0),
    }


def value_stats(values, returns, loss_mask) -> dict[str, float]:
    """What an explained variance is made of. values, returns, loss_mask: [B, T]; pooled over
    loss tokens: value/return mean and population std, their correlation, and
    var_ratio = Var(V) / Var(R), so that EV = 2 * corr * sqrt(var_ratio) - var_ratio."""
    mask = loss_mask.bool()
    v = values.detach().double()[mask]
    r = returns.detach().double()[mask]
    sv, sr = float(v.std(unbiased=False)), float(r.std(unbiased=False))
    cov = float(((v - v.mean()) * (r - r.mean())).mean())
    return {
        "value_mean": float(v.mean()),
        "value_std": sv,
        "return_mean": float(r.mean()),
        "return_std": sr,
        "corr": cov / (sv * sr) if sv > 0 and sr > 0 else math.nan,
        "var_ratio": sv**2 / sr**2 if sr > 0 else math.nan,
    }


# ------------------------------------------------------------------ batches


def generate_batches(args: argparse.Namespace) -> list[Path]:
    """WORK/batches/batch_NN for NN < --generate: `t1 rollout` with the SFT policy, seeds
    SEED_BASE + NN. A directory with rollout.json is reused; a partial one is redone."""
    out = []
    for i in range(args.generate):
        d = Path(args.work) / "batches" / f"batch_{i:02d}"
        out.append(d)
        if (d / "rollout.json").exists():
            continue
        if d.exists():
            import shutil

            shutil.rmtree(d)
        cmd = [sys.executable, "-m", "t1.cli", "rollout", "--config", args.config]
        cmd += ["--policy", str(Path(args.sft) / "actor"), "--tokenizer", args.tokenizer]
        cmd += ["--tasks", *args.tasks, "--seed", str(args.seed_base + i), "--out", str(d)]
        print(f"$ {' '.join(cmd)}", flush=True)
        rc = subprocess.call(cmd)
        if rc:
            raise SystemExit(f"t1 bench critic: rollout for {d} failed with exit {rc}")
    return out


# ------------------------------------------------------------------ the two arms


def run_arm(arm: str, cfg, args: argparse.Namespace, batches: list[Any]) -> list[dict[str, Any]]:
    """The PPO steps of one arm on the given collated batches; returns its ev_curve."""
    import torch

    from t1.store.metrics_log import MetricsLog, read_events
    from t1.train.ppo import _fresh, campaign_step

    torch.manual_seed(cfg.run.seed)  # as `t1 train` does before a stage
    critic_dir = args.critic if arm == "warm" else None
    trainer, progress = _fresh(cfg, Path(args.sft), critic_dir)
    if progress["critic_start"] != arm:
        raise SystemExit(
            f"t1 bench critic: arm {arm} built a {progress['critic_start']} critic "
            "(critic_warmup.enabled false in the config?)"
        )
    adir = Path(args.work) / arm
    metrics_file = adir / "metrics.jsonl"
    metrics_file.unlink(missing_ok=True)  # an arm is rerun whole
    # The step's first critic_values call is V0, the values its EV is taken from: keep it
    # (an instance attribute wrapping the method; no extra forward, no change to the step).
    seen = []
    values_of = trainer.critic_values

    def spy(batch):
        v = values_of(batch)
        seen.append(v)
        return v

    trainer.critic_values = spy
    with MetricsLog(adir, tensorboard=False) as log:
        for step, batch in enumerate(batches):
            t0 = time.perf_counter()
            seen.clear()
            m = campaign_step(trainer, batch, cfg, progress)
            fields = {k: v for k, v in m.items() if not k.startswith("_")}
            fields.update(critic_start=arm, recalibration_left=progress["recalibration_left"])
            fields["v0"] = value_stats(seen[0], m["_returns"], batch.loss_mask)
            log.write("ppo_step", step, **fields)
            ev = fields["explained_variance"]
            print(
                f"{arm} step {step}: ev {ev:.4f} value_loss {fields['value_loss']:.4f} "
                f"actor {'yes' if fields['actor_updated'] else 'no'} "
                f"({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    return ev_curve(read_events(metrics_file))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_json_atomic(path, json_safe(data), default=str)  # NaN/inf are not JSON: _clean them


def _curve_record(curve: list[dict[str, Any]]) -> dict[str, Any]:
    ev = [p["explained_variance"] for p in curve]
    return {
        "explained_variance": ev,
        "value_loss": [p["value_loss"] for p in curve],
        "actor_updated": [p["actor_updated"] for p in curve],
        "v0": [p["v0"] for p in curve],
        "summary": summarize(ev),
    }


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """Left: EV per step for each arm (symlog y when a value falls below -2), the warm arm's
    critic-only steps shaded. Right: the value loss per step (log y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    lowest = 0.0
    for arm, style in (("warm", "o-"), ("cold", "s--")):
        rec = result["arms"].get(arm)
        if not rec:
            continue
        pts = [(i, v) for i, v in enumerate(rec["explained_variance"]) if v is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=f"{arm} critic")
            lowest = min(lowest, min(v for _, v in pts))
        loss = [(i, v) for i, v in enumerate(rec["value_loss"]) if v is not None and v > 0]
        if loss:
            bx.plot(*zip(*loss, strict=True), style, label=f"{arm} critic")
        if arm == "warm":
            for i, updated in enumerate(rec["actor_updated"]):
                if updated is False:
                    for a in (ax, bx):
                        a.axvspan(i - 0.5, i + 0.5, color="0.9", zorder=0)
    ax.axhline(0.0, color="k", lw=0.8)
    if lowest < -2:
        ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylabel("explained variance (values before the update)")
    bx.set_yscale("log")
    bx.set_ylabel("value loss")
    for a in (ax, bx):
        a.set_xlabel("PPO step (shaded: warm arm re-calibrates, critic only)", fontsize=8)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(result.get("title", "critic warm-up vs cold start, same batches"), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def from_metrics(specs: list[str]) -> dict[str, Any]:
    """ARM=DIR pairs: every metrics.jsonl under DIR (a campaign's ppo/steps) -> that arm's curve."""
    from t1.store.metrics_log import read_events

    arms = {}
    for spec in specs:
        arm, _, d = spec.partition("=")
        if not d:
            raise SystemExit(f"t1 bench critic: --metrics {spec!r}: expected ARM=DIR")
        files = sorted(Path(d).rglob("metrics.jsonl"))
        if not files:
            raise SystemExit(f"t1 bench critic: {d}: no metrics.jsonl below it")
        events = [e for f in files for e in read_events(f, "ppo_step")]
        arms[arm] = _curve_record(ev_curve(events))
    return {"source": "metrics", "metrics": specs, "arms": arms}


def run_experiment(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from t1.config import load_config
    from t1.train.batch import collate
    from t1.train.data import DataError, load_rows
    from t1.train.state import load_tokenizer_for

    cfg = load_config(args.config)
    torch.set_num_threads(max(1, min(args.threads, cfg.run.threads)))
    t0 = time.perf_counter()
    dirs = [Path(d) for d in args.rollouts] if args.rollouts else generate_batches(args)
    gen_s = time.perf_counter() - t0
    tokenizer = load_tokenizer_for(args.tokenizer, [str(d) for d in dirs])
    batches, stats = [], []
    for d in dirs:
        try:
            rows, _ = load_rows([d], tokenizer, reward="trajectory")
        except DataError as e:
            raise SystemExit(f"t1 bench critic: {e}") from None
        if not rows:
            raise SystemExit(f"t1 bench critic: {d}: no trainable trajectory")
        batch = collate(rows)
        batches.append(batch)
        rewards = [float(m["reward"]) for m in batch.meta if "reward" in m]
        stats.append({"dir": str(d), "segments": len(rows), **reward_stats(rewards)})
    key = {"batches": [str(d) for d in dirs], "sft": args.sft, "critic": args.critic}
    arms: dict[str, Any] = {}
    seconds: dict[str, float] = {"generate": gen_s}
    for arm in ARMS:
        cached = Path(args.work) / arm / "curve.json"
        if cached.exists():
            saved = json.loads(cached.read_text())
            if saved.get("key") == key and saved.get("status") == "complete":
                print(f"{arm}: reusing {cached}", flush=True)
                arms[arm], seconds[arm] = saved["curve"], saved["seconds"]
                continue
        t1 = time.perf_counter()
        curve = run_arm(arm, cfg, args, batches)
        seconds[arm] = time.perf_counter() - t1
        arms[arm] = _curve_record(curve)
        _write_json(
            cached,
            {
                "schema_version": SCHEMA_VERSION,
                "status": "complete",
                "key": key,
                "curve": arms[arm],
                "seconds": seconds[arm],
            },
        )
    return {
        "source": "fixed rollout batches generated by the SFT policy, shared by both arms",
        "config": args.config,
        "sft": args.sft,
        "critic": args.critic,
        "recalibration_rollouts": cfg.critic_warmup.recalibration_rollouts,
        "critic_lr": cfg.ppo.critic_lr,
        "threads": torch.get_num_threads(),
        "batches": stats,
        "arms": arms,
        "seconds": seconds,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="campaign YAML (the run's config.yaml)")
    parser.add_argument("--sft", help="SFT output DIR (its actor/ starts both arms)")
    parser.add_argument("--critic", help="critic_warmup output DIR (the warm arm's critic)")
    parser.add_argument("--tokenizer", help="tokenizer DIR")
    parser.add_argument("--rollouts", nargs="+", help="one rollout DIR per step (fixed batches)")
    parser.add_argument("--generate", type=int, default=8, help="batches to generate (8)")
    parser.add_argument("--tasks", nargs="+", default=["workflow/tasks"], help="rollout tasks")
    parser.add_argument("--seed-base", type=int, default=1000, help="batch i: seed BASE+i")
    parser.add_argument("--work", default="/tmp/t1-bench-critic", help="work directory")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (<= run.threads)")
    parser.add_argument("--metrics", nargs="+", help="ARM=DIR: curves of finished campaigns")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--plot", help="write the PNG here")


def main(args: argparse.Namespace) -> int:
    if args.metrics:
        result = from_metrics(args.metrics)
    else:
        missing = [
            f"--{k}" for k in ("config", "sft", "critic", "tokenizer") if not getattr(args, k)
        ]
        if missing:
            print(f"t1 bench critic: missing {', '.join(missing)}", file=sys.stderr)
            return 2
        result = run_experiment(args)
    result = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "bench": "critic",
        **result,
        "paper": PAPER,
    }
    if args.plot:
        plot_curves(result, Path(args.plot))
    text = json.dumps(json_safe(result), indent=1, default=str)
    if args.json:
        _write_json(Path(args.json), result)
    print(text)
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m t1.bench.critic", description=__doc__)
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
