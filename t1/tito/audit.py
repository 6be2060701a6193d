"""`t1 tito-audit DIR [--json FILE]`: assemble every trajectory of a rollout and count drift.

    t1 tito-audit results/rollout --json results/rollout/tito_audit.json
    t1 tito-audit DIR --tokenizer DIR --config workflow/config/tiny.yaml

Reads every trajectory directory under DIR (t1/trajectory.py), assembles the COMPLETED and
TRUNCATED ones with t1.tito (the others are not trained on and are only counted), and prints a
table: relation counts per turn boundary, context drift per relation, loss tokens, drift in
the loss region, routing placeholders. `--json` writes (atomically) exactly the keys
`trajectories`, `loss_tokens`, `drift_tokens`, `drift_rate`, `placeholder_rate`,
`placeholder_in_loss`, `relations` (`strict`, `normalized`, `retokenized`, `split`).

The tokenizer (needed only to recognise the retokenized relation) comes from `--tokenizer`,
else from the config's `tokenizer` section, else from a trajectory's `metadata.tokenizer`
path; without one, boundaries that would be retokenized count as split. Exit status 1 when
any trajectory fails to assemble, drifts, or has a placeholder in its loss region.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic
from t1.tito import DEFAULT_AHEAD, DEFAULT_BACK, RELATIONS, Audit, TitoError, assemble
from t1.trajectory import Status, TrajectoryError, find_trajectories, load_trajectory, read_header

TRAINED = (Status.COMPLETED, Status.TRUNCATED)


def audit_dir(
    root: str | Path, tokenizer=None, back: int = DEFAULT_BACK, ahead: int = DEFAULT_AHEAD
) -> dict[str, Any]:
    """Audit every trajectory under `root`: {"audit": Audit, "skipped": {...}, "errors": [...]}."""
    total = Audit()
    skipped: dict[str, int] = {}
    errors: list[tuple[str, str]] = []
    tokenizers: dict[str, Any] = {}
    for path in find_trajectories(root):
        try:
            header = read_header(path)
            if Status(header["status"]) not in TRAINED:
                skipped[header["status"]] = skipped.get(header["status"], 0) + 1
                continue
            traj = load_trajectory(path)
        except (TrajectoryError, ValueError) as e:
            errors.append((str(path), str(e)))
            continue
        tok = tokenizer
        meta_tok = traj.metadata.get("tokenizer")
        if tok is None and meta_tok:
            if meta_tok not in tokenizers:
                from t1.tokenizer import load_tokenizer

                tokenizers[meta_tok] = load_tokenizer(meta_tok)
            tok = tokenizers[meta_tok]
        try:
            total.merge(assemble(traj.turns, tok, back, ahead).audit)
        except TitoError as e:
            errors.append((str(path), str(e)))
    return {"audit": total, "skipped": skipped, "errors": errors}


def table(result: dict[str, Any]) -> str:
    a: Audit = result["audit"]
    d = a.to_dict()
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(result["skipped"].items())) or "none"
    lines = [
        f"trajectories     {a.trajectories}   (turns {a.turns}, segments {a.segments}; not trained: {skipped};"
        f" errors {len(result['errors'])})",
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
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="rollout directory (trajectory directories at any depth)")
    parser.add_argument("--json", help="write the summary JSON here")
    parser.add_argument("--tokenizer", help="tokenizer directory (for the retokenized relation)")
    parser.add_argument("--config", help="campaign config (tokenizer and tito sections)")


def main(args: argparse.Namespace) -> int:
    if not Path(args.dir).is_dir():
        print(f"t1 tito-audit: {args.dir}: no such directory", file=sys.stderr)
        return 2
    back, ahead, tok = DEFAULT_BACK, DEFAULT_AHEAD, None
    if args.config:
        from t1.config import load_config
        from t1.tokenizer import tokenizer_from_config

        cfg = load_config(args.config)
        back, ahead = cfg.tito.normalized_back, cfg.tito.normalized_ahead
        if not args.tokenizer:
            tok = tokenizer_from_config(cfg.tokenizer)
    if args.tokenizer:
        from t1.tokenizer import load_tokenizer

        tok = load_tokenizer(args.tokenizer)
    result = audit_dir(args.dir, tok, back, ahead)
    print(table(result))
    summary = result["audit"].to_dict()
    if args.json:
        write_json_atomic(args.json, summary, indent=2)
    bad = result["errors"] or summary["drift_tokens"] or summary["placeholder_in_loss"]
    return 1 if bad else 0
