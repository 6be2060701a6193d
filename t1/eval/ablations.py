"""`t1 ablations`: the paper's ablation figures next to ours, one table from measured files.

    t1 ablations --run-dir results/tiny --binary results/tiny-binary --cold results/tiny-cold \\
        --gap results/tiny/ablations/gap.json --drift results/tiny/ablations/drift.json \\
        --critic results/tiny/ablations/critic/seed_*/critic.json --out results/tiny/ablations.md

What `snakemake --profile profiles/local campaign_ablations` runs last
(workflow/rules/ablations.smk runs the measurements before it). One row per ablation:

(a) train-inference gap: `t1 bench gap --rollout RUN/ppo/steps/step_000000/rollout --policy
    RUN/sft/model/actor` (gap.json): (a) text re-tokenized, (b) TITO, (c) TITO + R3.
    Shape: (c) below (a). Paper: 0.021 without, 0.013 with TITO + R3.
(b) TITO drift: `t1 tito-audit --full-json` over every trajectory of the three runs (drift.json),
    against the engine's raw output ids. Counted: the policy's samples (PPO and warm-up
    rollouts, evaluations); expert trajectories (a scripted engine) are listed, not counted.
    Shape: drift exactly 0 (no drifted loss token, no assembly error, no rollout abort by
    TITO). Paper: 0.0000% over 1,402 samples; the count is ours, whatever it is (the issue
    asks >= 1,000).
(c) critic warm-up vs cold start: `t1 bench critic --rollouts` (critic/seed_S/critic.json): both
    critics on the SAME batches (the dense run's PPO rollouts), one run per seed (run.seed S:
    the trainer's minibatch shuffle and the cold arm's fresh value head). Shape, in every seed:
    the warm critic's EV never negative and the cold one's opens negative. Paper: cold opens at
    -33.6, negative 30 of 58 steps; warmed never negative, plateau 0.71-0.86. With --cold, the
    two campaigns' own on-policy curves (each its own batches) are shown beside it.
(d) dense vs binary reward: per PPO step, the resolved rate of the training rollouts (the
    `ppo_step` events of RUN/ppo/steps/step_*/train/metrics.jsonl), and the final evaluation
    (eval/ppo/eval.json, Wilson 95% interval) of both runs against the supervised baseline
    (the binary run's eval/sft/eval.json, or the dense run's where the arm shares its SFT).
    Shape, each by the pooled two-proportion z-test: dense PPO above binary PPO at p < 0.05,
    and binary PPO not above the baseline at p < 0.05 (below it, or a difference the test
    cannot tell from noise). Paper: binary reward never beat the SFT baseline.
(e) SFT vs PPO on held-out tasks: RUN/summary.json's `heldout` (t1 report). Shape: PPO above
    SFT by the pooled two-proportion z-test at p < 0.05, the statistic of the campaign's own
    held-out target (the Wilson intervals and the paired McNemar test beside). Cross-checked
    with RUN/pool/{train,eval}/manifest.json: a held-out split while every eval-pool task is
    in the train pool is "not measurable" (the split is not held out).

Each row: our figure (with its interval or seed spread), the paper's, whether the shape holds
(yes / no / not measurable, and why) and its source files. A missing, empty or unreadable
input, or one whose record is not complete, is an error naming the file (exit 2); a measured
file whose figure is undefined (no trajectory, equal rewards everywhere, no held-out split)
gives "not measurable" with the reason, never a blank. Writes OUT (Markdown), OUT with .json
(the rows and every series) and two PNGs beside OUT: <stem>_critic.png, <stem>_reward.png.

Where the rows are built: (a) and (b) t1/eval/ablations_tito.py, (c) ablations_critic.py,
(d) ablations_reward.py, (e) ablations_heldout.py; reading the inputs ablations_inputs.py, the
row itself (verdicts, paper figures, cells) ablations_rows.py, the page and plots
ablations_render.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from t1.eval.ablations_critic import campaign_curves, critic_row
from t1.eval.ablations_heldout import heldout_row
from t1.eval.ablations_inputs import AblationError
from t1.eval.ablations_render import markdown, plot_critic, plot_reward
from t1.eval.ablations_reward import reward_row
from t1.eval.ablations_rows import check_filled
from t1.eval.ablations_tito import drift_row, gap_row
from t1.records import json_safe, write_atomic, write_json_atomic

SCHEMA_VERSION = 1


def build(
    run_dir: Path,
    binary: Path,
    gap: Path,
    drift: Path,
    critic: Sequence[Path],
    cold: Path | None = None,
) -> list[dict[str, Any]]:
    """The five rows, (a) to (e), from the measured files (AblationError names a bad one)."""
    run_dir = Path(run_dir)
    campaign = campaign_curves(run_dir, Path(cold)) if cold else None
    return [
        gap_row(gap),
        drift_row(drift),
        critic_row(critic, campaign),
        reward_row(run_dir, Path(binary)),
        heldout_row(run_dir / "summary.json"),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, help="the main run (dense reward, warm critic)")
    parser.add_argument("--binary", required=True, help="the binary-reward run (NAME-binary)")
    parser.add_argument("--cold", help="the cold-critic run (NAME-cold): its own EV curve too")
    parser.add_argument("--gap", required=True, help="t1 bench gap --json of the main run")
    parser.add_argument("--drift", required=True, help="t1 tito-audit --full-json of the runs")
    parser.add_argument(
        "--critic", nargs="+", required=True, help="t1 bench critic --json, one per seed"
    )
    parser.add_argument("--out", required=True, help="the Markdown table (JSON beside it)")


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        rows = build(
            Path(args.run_dir), Path(args.binary), Path(args.gap), Path(args.drift),
            [Path(p) for p in args.critic], Path(args.cold) if args.cold else None,
        )  # fmt: skip
    except (AblationError, ValueError) as e:
        print(f"t1 ablations: {e}", file=sys.stderr)
        return 2
    check_filled(rows)
    by_key = {r["key"]: r for r in rows}
    plots = [out.with_name(f"{out.stem}_critic.png"), out.with_name(f"{out.stem}_reward.png")]
    plot_critic(by_key["critic"], plots[0])
    plot_reward(by_key["reward"], plots[1])
    run_dir = Path(args.run_dir)
    text = markdown(rows, run_dir.name, [str(p) for p in plots], run_dir.parent)
    write_atomic(out, text)
    write_json_atomic(
        out.with_suffix(".json"),
        json_safe({"schema_version": SCHEMA_VERSION, "run": Path(args.run_dir).name, "rows": rows,
                "plots": [str(p) for p in plots]}),
        indent=1,
    )  # fmt: skip
    print(text)
    return 0
