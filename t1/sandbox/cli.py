"""`t1 sandbox run`: one command in a fresh sandbox; prints its output, exits with its exit code.

    t1 sandbox run -- uname -a
    t1 sandbox run --backend bwrap --workdir /tmp/w --timeout 10 -- 'ls; cat /etc/shadow'
    t1 sandbox run --network -- apt-get install -y jq        # network: environment builds only

The command words are joined with spaces and run by the sandbox's bash (so `--` followed by a
quoted shell line works too). `--workdir DIR` binds the host dir DIR as the sandbox's workdir
(default: a fresh empty one at /app). A timeout exits 124, like `timeout(1)`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from t1.sandbox import BACKENDS, Limits, SandboxError, SandboxSpec, open_sandbox


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run one command in a fresh sandbox")
    run.add_argument("--backend", choices=BACKENDS, default="bwrap")
    run.add_argument(
        "--workdir", type=Path, default=None, help="host dir bound as the sandbox workdir"
    )
    run.add_argument("--inside", default="/app", help="the workdir's path inside (default /app)")
    run.add_argument(
        "--timeout", type=float, default=None, help="seconds before the command is interrupted"
    )
    run.add_argument("--memory-mb", type=int, default=Limits().memory_mb)
    run.add_argument("--max-processes", type=int, default=Limits().max_processes)
    run.add_argument("--image", default=None, help="apptainer image (.sif or docker://...)")
    run.add_argument("--env-layer", type=Path, default=None, help="built environment layer (bwrap)")
    run.add_argument("--network", action="store_true", help="keep the host network (builds only)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD...")


def command_line(words: list[str]) -> str:
    """argv after `--` -> one shell line (a single word is taken as a shell line as-is)."""
    if words and words[0] == "--":
        words = words[1:]
    if len(words) == 1:
        return words[0]
    return " ".join(w if _plain(w) else shlex.quote(w) for w in words)


def _plain(word: str) -> bool:
    return shlex.quote(word) == word or word in ("|", "&&", "||", ";", ">", ">>", "<", "2>&1")


def main(args: argparse.Namespace) -> int:
    line = command_line(list(args.cmd))
    if not line.strip():
        print("t1 sandbox run: no command given (t1 sandbox run -- CMD...)", file=sys.stderr)
        return 2
    spec = SandboxSpec(
        workdir=args.inside,
        host_workdir=args.workdir.resolve() if args.workdir else None,
        env_layer=args.env_layer,
        image=args.image,
        network=args.network,
        limits=Limits(memory_mb=args.memory_mb, max_processes=args.max_processes),
        output_cap_bytes=1 << 20,
    )
    try:
        with open_sandbox(spec, backend=args.backend) as sb:
            r = sb.exec(line, timeout=args.timeout)
    except SandboxError as e:
        print(f"t1 sandbox run: {e}", file=sys.stderr)
        return 125
    sys.stdout.write(r.output)
    sys.stdout.flush()
    return r.exit_code
