"""`t1 tito-audit DIR... [--json FILE]`: assemble every trajectory of rollouts and count drift.

    t1 tito-audit results/rollout --json results/rollout/tito_audit.json
    t1 tito-audit DIR --tokenizer DIR --config workflow/config/tiny.yaml
    t1 tito-audit results/tiny results/tiny-binary results/tiny-cold --exclude ablations \
        --full-json results/tiny/ablations/drift.json --exit-zero   # a whole campaign

Reads every trajectory directory under each DIR (any depth; t1/agent/trajectory.py), assembles the
COMPLETED and TRUNCATED ones with t1.tito (the others are not trained on and are only counted),
and prints a table: relation counts per turn boundary, context drift per relation, loss tokens,
drift in the loss region, routing placeholders. `--json` writes (atomically) exactly the keys
`trajectories`, `loss_tokens`, `drift_tokens`, `drift_rate`, `placeholder_rate`,
`placeholder_in_loss`, `relations` (`strict`, `normalized`, `retokenized`, `split`).

The drift is counted against the engine's raw output ids (`Turn.engine_ids`); a trajectory
with a turn that has none (a record older than trajectory schema 2) can only be checked
against its own sampled ids. (Expert trajectories carry the ids of the scripted engine that
replayed the reference solution.) `--full-json` writes the `--json` keys plus
`engine_checked` (the same counters over the trajectories whose every turn carries the
engine's ids: the figure that means something), `self_checked` (their count over the
others), `not_trained` (by status), `tito_aborted` (not-trained trajectories the rollout
itself aborted with a TITO error: where drift would have shown), `errors` (path, message; a
trajectory whose assembly fails, drift included), `by_dir` (the same counts per rollout
directory - a trajectory's directory with its `trajectories/` or `dropped/` level cut off -
with `engine_loss_tokens` and `engine_drift_tokens` over its engine-checked ones) and
`dirs`. `--exclude NAME` skips every trajectory below a directory called NAME.

The tokenizer (needed only to recognise the retokenized relation) comes from `--tokenizer`,
else from the config's `tokenizer` section, else from a trajectory's `metadata.tokenizer`
path; without one, boundaries that would be retokenized count as split. Exit status 1 when
any trajectory fails to assemble, drifts, or has a placeholder in its loss region (with
`--exit-zero`: 0 whenever the audit ran; the JSON says what it found), 2 when a DIR is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from t1.agent.trajectory import (
    Status,
    TrajectoryError,
    find_trajectories,
    load_trajectory,
    read_header,
)
from t1.records import write_json_atomic
from t1.tito import DEFAULT_AHEAD, DEFAULT_BACK, RELATIONS, Audit, TitoError, assemble

TRAINED = (Status.COMPLETED, Status.TRUNCATED)


def rollout_dir_of(path: Path) -> Path:
    """The rollout directory a trajectory belongs to: its parent, without the
    `trajectories/` or `dropped/` level `t1.rollout.collect.write_batch` puts in between."""
    parent = path.parent
    return parent.parent if parent.name in ("trajectories", "dropped") else parent


def _counts() -> dict[str, Any]:
    return {
        "trajectories": 0,
        "engine_checked": 0,
        "loss_tokens": 0,
        "drift_tokens": 0,
        "engine_loss_tokens": 0,
        "engine_drift_tokens": 0,
        "not_trained": 0,
        "tito_aborted": 0,
        "errors": 0,
    }


def audit_dirs(
    roots: list[str | Path],
    tokenizer=None,
    back: int = DEFAULT_BACK,
    ahead: int = DEFAULT_AHEAD,
    exclude: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Audit every trajectory under each of `roots` (a trajectory found twice counts once).

    Returns {"audit": Audit (all assembled), "engine": Audit (those whose every turn carries
    the engine's ids), "skipped": {status: n}, "tito_aborted": [(path, reason)], "errors":
    [(path, message)], "by_dir": {rollout dir: counts}}."""
    total, engine = Audit(), Audit()
    skipped: dict[str, int] = {}
    errors: list[tuple[str, str]] = []
    aborted: list[tuple[str, str]] = []
    by_dir: dict[str, dict[str, Any]] = {}
    tokenizers: dict[str, Any] = {}
    seen: set[Path] = set()
    paths = []
    for root in roots:
        for path in find_trajectories(root):
            rel = path.relative_to(root).parts
            if any(part in exclude for part in rel) or path.resolve() in seen:
                continue
            seen.add(path.resolve())
            paths.append(path)
    for path in paths:
        counts = by_dir.setdefault(str(rollout_dir_of(path)), _counts())
        try:
            header = read_header(path)
            if Status(header["status"]) not in TRAINED:
                skipped[header["status"]] = skipped.get(header["status"], 0) + 1
                counts["not_trained"] += 1
                reason = str(header.get("reason") or "")
                if reason.startswith("tito:"):
                    aborted.append((str(path), reason))
                    counts["tito_aborted"] += 1
                continue
            traj = load_trajectory(path)
        except (TrajectoryError, ValueError) as e:
            errors.append((str(path), str(e)))
            counts["errors"] += 1
            continue
        tok = tokenizer
        meta_tok = traj.metadata.get("tokenizer")
        if tok is None and meta_tok:
            if meta_tok not in tokenizers:
                from t1.agent.tokenizer import load_tokenizer

                tokenizers[meta_tok] = load_tokenizer(meta_tok)
            tok = tokenizers[meta_tok]
        try:
            one = assemble(traj.turns, tok, back, ahead).audit
        except TitoError as e:
            errors.append((str(path), str(e)))
            counts["errors"] += 1
            continue
        total.merge(one)
        checked = bool(traj.turns) and all(t.engine_ids is not None for t in traj.turns)
        if checked:
            engine.merge(one)
        counts["trajectories"] += 1
        counts["engine_checked"] += checked
        counts["loss_tokens"] += one.loss_tokens
        counts["drift_tokens"] += one.drift_tokens
        if checked:
            counts["engine_loss_tokens"] += one.loss_tokens
            counts["engine_drift_tokens"] += one.drift_tokens
    return {
        "audit": total,
        "engine": engine,
        "skipped": skipped,
        "tito_aborted": aborted,
        "errors": errors,
        "by_dir": by_dir,
    }


def audit_dir(
    root: str | Path, tokenizer=None, back: int = DEFAULT_BACK, ahead: int = DEFAULT_AHEAD
) -> dict[str, Any]:
    """Audit every trajectory under `root`: {"audit": Audit, "skipped": {...}, "errors": [...],
    and the rest of `audit_dirs`'s keys}."""
    return audit_dirs([root], tokenizer, back, ahead)


def full_summary(result: dict[str, Any], dirs: list[str]) -> dict[str, Any]:
    """The `--full-json` document (module docstring)."""
    total: Audit = result["audit"]
    engine: Audit = result["engine"]
    return {
        **total.to_dict(),
        "engine_checked": engine.to_dict(),
        "self_checked": total.trajectories - engine.trajectories,
        "not_trained": dict(sorted(result["skipped"].items())),
        "tito_aborted": [{"path": p, "reason": r} for p, r in result["tito_aborted"]],
        "errors": [{"path": p, "message": m} for p, m in result["errors"]],
        "by_dir": dict(sorted(result["by_dir"].items())),
        "dirs": list(dirs),
    }


def table(result: dict[str, Any]) -> str:
    a: Audit = result["audit"]
    d = a.to_dict()
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(result["skipped"].items())) or "none"
    lines = [
        f"trajectories     {a.trajectories}   (turns {a.turns}, segments {a.segments}; not trained: {skipped};"
        f" errors {len(result['errors'])})",
        f"engine-checked   {result['engine'].trajectories}   (every turn carries the engine's"
        f" ids; the other {a.trajectories - result['engine'].trajectories} only their own;"
        f" aborted by TITO in the rollout: {len(result['tito_aborted'])})",
        f"loss tokens      {a.loss_tokens}",
        f"drift tokens     {a.drift_tokens}   (rate {100 * d['drift_rate']:.4f}%)",
        f"placeholders     {a.placeholders} of {a.positions} positions ({100 * d['placeholder_rate']:.4f}%);"
        f" in loss region {a.placeholder_in_loss}; segment ends {a.final_placeholders}",
        "",
        f"{'relation':<12} {'boundaries':>10} {'context drift':>14}",
    ]
    for r in RELATIONS:
        lines.append(f"{r:<12} {a.relations[r]:>10} {a.context_drift[r]:>14}")
    for path, err in result["errors"]:
        lines.append(f"ERROR {path}: {err}")
    for path, reason in result["tito_aborted"]:
        lines.append(f"TITO-ABORTED {path}: {reason}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="rollout directories (trajectories at any depth)"
    )
    parser.add_argument("--json", help="write the summary JSON here")
    parser.add_argument(
        "--full-json", help="write the summary plus engine-checked, per-directory counts here"
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="NAME",
        help="skip trajectories below a directory called NAME (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when drift or errors are found"
    )
    parser.add_argument("--tokenizer", help="tokenizer directory (for the retokenized relation)")
    parser.add_argument("--config", help="campaign config (tokenizer and tito sections)")


def main(args: argparse.Namespace) -> int:
    for d in args.dirs:
        if not Path(d).is_dir():
            print(f"t1 tito-audit: {d}: no such directory", file=sys.stderr)
            return 2
    back, ahead, tok = DEFAULT_BACK, DEFAULT_AHEAD, None
    if args.config:
        from t1.agent.tokenizer_train import tokenizer_from_config
        from t1.config import load_config

        cfg = load_config(args.config)
        back, ahead = cfg.tito.normalized_back, cfg.tito.normalized_ahead
        if not args.tokenizer:
            tok = tokenizer_from_config(cfg.tokenizer)
    if args.tokenizer:
        from t1.agent.tokenizer import load_tokenizer

        tok = load_tokenizer(args.tokenizer)
    result = audit_dirs(args.dirs, tok, back, ahead, tuple(args.exclude))
    print(table(result))
    summary = result["audit"].to_dict()
    if args.json:
        write_json_atomic(args.json, summary, indent=2)
    if args.full_json:
        write_json_atomic(args.full_json, full_summary(result, args.dirs), indent=2)
    bad = result["errors"] or summary["drift_tokens"] or summary["placeholder_in_loss"]
    return 1 if bad and not args.exit_zero else 0
