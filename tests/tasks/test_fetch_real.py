"""Re-creating the real task set from a git mirror (t1.tasks.fetch_real): tree ids are checked.

.venv/bin/python -m pytest tests/tasks/test_fetch_real.py -q
"""

from __future__ import annotations

import json
import subprocess

from t1.tasks.fetch_real import main


def git(cwd, *args):
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_export_checks_the_tree_and_copies_the_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tasks" / "hello" / "tests").mkdir(parents=True)
    (repo / "tasks" / "hello" / "task.toml").write_text("[metadata]\n")
    (repo / "tasks" / "hello" / "tests" / "test.sh").write_text("true\n")
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    commit, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD:tasks/hello")
    entry = {
        "repo": "o/r",
        "commit": commit,
        "path": "tasks/hello",
        "layout": "v2",
        "name": "hello",
    }
    lst = tmp_path / "list.json"
    lst.write_text(json.dumps({"schema_version": 1, "tasks": [{**entry, "tree": tree}]}))
    assert main([str(lst), "--mirror", f"o/r={repo}", "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "v2" / "hello" / "tests" / "test.sh").read_text() == "true\n"
    lst.write_text(json.dumps({"schema_version": 1, "tasks": [{**entry, "tree": "0" * 40}]}))
    assert main([str(lst), "--mirror", f"o/r={repo}", "--out", str(tmp_path / "out2")]) == 1
    assert not (tmp_path / "out2" / "v2" / "hello").exists()
    assert main([str(lst), "--out", str(tmp_path / "out3")]) == 1  # no mirror for o/r
