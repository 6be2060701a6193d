"""Re-create the set of real public Terminal-Bench tasks listed in a JSON file, from local git mirrors.

    python -m t1.tasks.fetch_real workflow/real-tasks.json \\
        --mirror purple29th/purple29th-tbench-2=GIT_DIR_A \\
        --mirror rese1f/terminal-bench-datasets=GIT_DIR_B \\
        --out OUT                    # -> OUT/v1/<name>, OUT/v2/<name>

The list (schema_version 1) names, per task, the repository, commit, path inside it, layout
(v1 `task.yaml` / v2 `task.toml`), a local name and the git tree id of the task directory.
Each task is exported with `git archive COMMIT:PATH` from the mirror given for its repository
(a bare or normal git directory that holds the commit) after checking that the tree id at that
commit and path is the recorded one, so the files are byte-identical to upstream. Third-party
task files are never committed here: only the list and this script.

Exit codes: 0 every task exported, 1 some task failed (each failure named), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path


def load_list(path: Path) -> list[dict]:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema_version") != 1 or not isinstance(doc.get("tasks"), list):
        raise ValueError(f"{path}: not a task list (schema_version 1 with a `tasks` list)")
    for i, t in enumerate(doc["tasks"]):
        missing = {"repo", "commit", "path", "layout", "name", "tree"} - set(t)
        if missing:
            raise ValueError(f"{path}: tasks[{i}]: missing {', '.join(sorted(missing))}")
    return doc["tasks"]


def _git(git_dir: Path, *args: str) -> bytes:
    r = subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {git_dir}: {r.stderr.decode().strip()}")
    return r.stdout


def export(task: dict, git_dir: Path, out: Path) -> Path:
    """Export one task to out/<layout>/<name>, after checking its tree id; -> the directory."""
    ref = f"{task['commit']}:{task['path']}"
    tree = _git(git_dir, "rev-parse", ref).decode().strip()
    if tree != task["tree"]:
        raise RuntimeError(f"{task['repo']} {ref}: tree {tree} is not the listed {task['tree']}")
    dest = out / task["layout"] / task["name"]
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(_git(git_dir, "archive", "--format=tar", ref))) as tar:
        tar.extractall(tmp, filter="tar")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("list", type=Path, help="task list (JSON)")
    p.add_argument("--mirror", action="append", default=[], metavar="OWNER/NAME=GIT_DIR")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    mirrors = {}
    for m in a.mirror:
        repo, sep, path = m.partition("=")
        if not sep:
            print(f"fetch_real: --mirror {m!r}: expected OWNER/NAME=GIT_DIR", file=sys.stderr)
            return 2
        mirrors[repo] = Path(path)
    try:
        tasks = load_list(a.list)
    except (OSError, ValueError) as e:
        print(f"fetch_real: {e}", file=sys.stderr)
        return 2
    bad = 0
    for t in tasks:
        if t["repo"] not in mirrors:
            print(f"FAIL {t['name']}: no --mirror for {t['repo']}")
            bad += 1
            continue
        try:
            print(f"ok   {export(t, mirrors[t['repo']], a.out)}")
        except (RuntimeError, OSError, tarfile.TarError) as e:
            print(f"FAIL {t['name']}: {e}")
            bad += 1
    print(f"{len(tasks) - bad} of {len(tasks)} tasks exported to {a.out}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
