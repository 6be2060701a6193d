"""`t1 synth`: recursive verified task synthesis (RST) into the v2 (Harbor) layout.

    t1 synth --rounds 5 --out results/synth --per-round 48 --jobs 2
    t1 synth --rounds 2 --out DIR --seeds workflow/tasks          # extend existing v2 tasks
    t1 synth --rounds 2 --out DIR --llm-url http://127.0.0.1:8000 --llm-api openai
    t1 synth --rounds 3 --out DIR --executor slurm --jobs 16      # validation as Slurm arrays
    t1 synth --config workflow/config/tiny.yaml --out DIR         # rounds/per_round/... from synth:

Flags override the config's `synth:` section. Prints one line per round and the per-round
table; exit 0 when the run completed, 1 when a round accepted nothing (the loop stops), 2 on
bad arguments. The layout of DIR is described in t1/synth/recursive.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="output directory (new or empty)")
    parser.add_argument("--config", type=Path, help="campaign config (its synth: section)")
    parser.add_argument("--rounds", type=int, help="extension rounds after the seeds")
    parser.add_argument("--per-round", type=int, help="candidates per round (and seeds)")
    parser.add_argument("--seed", type=int, help="RNG seed (default: the config's run.seed, or 0)")
    parser.add_argument(
        "--jobs", type=int, help="parallel validations (local processes / array tasks)"
    )
    parser.add_argument(
        "--seeds", type=Path, metavar="DIR", help="seed tasks (v2) instead of library seeds"
    )
    parser.add_argument("--executor", choices=("local", "slurm"), help="where validation runs")
    parser.add_argument(
        "--sandbox",
        choices=("bwrap", "apptainer"),
        help="sandbox backend (default: config sandbox.backend)",
    )
    parser.add_argument(
        "--env-cache", type=Path, help="environment layer cache (default: t1 oracle's)"
    )
    parser.add_argument(
        "--steps", type=str, help="library steps per extension, MIN-MAX (default 1-2)"
    )
    parser.add_argument(
        "--llm-url", help="OpenAI-compatible or SGLang server for model-written steps"
    )
    parser.add_argument("--llm-api", choices=("openai", "sglang"), help="endpoint kind")
    parser.add_argument(
        "--llm-model", default="default", help="model name sent to an OpenAI endpoint"
    )
    parser.add_argument(
        "--llm-tokenizer",
        type=Path,
        help="tokenizer dir, for /generate servers that take input_ids",
    )
    parser.add_argument(
        "--llm-fraction", type=float, help="share of candidates written by the model"
    )
    parser.add_argument("--slurm-partition", help="Slurm partition for the validation arrays")
    parser.add_argument(
        "--drop-rejected", action="store_true", help="do not keep rejected candidates"
    )


def main(args: argparse.Namespace) -> int:
    from t1.config import Config, load_config
    from t1.synth.recursive import SynthOptions, format_table, run

    cfg = load_config(args.config) if args.config else Config()
    s = cfg.synth
    steps_min, steps_max = s.steps_min, s.steps_max
    if args.steps:
        try:
            lo, _, hi = args.steps.partition("-")
            steps_min, steps_max = int(lo), int(hi or lo)
        except ValueError:
            print(f"t1 synth: --steps must be MIN-MAX, got {args.steps!r}", file=sys.stderr)
            return 2
    if not 1 <= steps_min <= steps_max:
        print("t1 synth: steps per extension must satisfy 1 <= MIN <= MAX", file=sys.stderr)
        return 2
    llm = None
    url = args.llm_url or s.llm_url
    if url:
        from t1.synth.llm import LLMClient, LLMSynthesizer

        client = LLMClient(
            url, api=args.llm_api or s.llm_api, model=args.llm_model, tokenizer=args.llm_tokenizer
        )
        llm = LLMSynthesizer(client)
    opts = SynthOptions(
        out=args.out,
        rounds=s.rounds if args.rounds is None else args.rounds,
        per_round=s.per_round if args.per_round is None else args.per_round,
        seed=cfg.run.seed if args.seed is None else args.seed,
        jobs=s.workers if args.jobs is None else args.jobs,
        seeds_dir=args.seeds,
        executor=args.executor or s.executor,
        backend=args.sandbox or cfg.sandbox.backend,
        cache_dir=args.env_cache
        or (Path(cfg.tasks.env_cache).expanduser() if args.config else None),
        steps_min=steps_min,
        steps_max=steps_max,
        llm=llm,
        llm_fraction=(s.llm_fraction if args.llm_fraction is None else args.llm_fraction)
        if llm
        else 0.0,
        keep_rejected=not args.drop_rejected,
        slurm={"slurm_partition": args.slurm_partition} if args.slurm_partition else {},
    )
    if opts.rounds < 0 or opts.per_round < 1 or opts.jobs < 1:
        print("t1 synth: need --rounds >= 0, --per-round >= 1, --jobs >= 1", file=sys.stderr)
        return 2
    try:
        summary = run(opts)
    except FileExistsError as e:
        print(f"t1 synth: {e}", file=sys.stderr)
        return 2
    print(format_table(summary["table"]))
    print(
        f"{summary['accepted']} tasks accepted ({summary['accepted_after_seeds']} after the seeds) "
        f"of {summary['candidates']} candidates in {summary['wall_s']:g} s "
        f"({summary['tasks_per_minute']:g} per minute) -> {args.out}"
    )
    return 0 if summary["status"] == "complete" else 1
