"""The command line: `t1 --help`, every subcommand's `--help`, and the `python -m t1.X` entry
points, as a user types them (the console script and fresh interpreters for the top level,
in-process for the subcommands so torch is imported once).

    .venv/bin/pytest tests/test_cli.py -q
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from t1.cli import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]
T1 = Path(sys.executable).with_name("t1")


def test_t1_help_lists_every_subcommand():
    r = subprocess.run([str(T1), "--help"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in COMMANDS:
        assert f"  {name} " in r.stdout, name


def test_an_unknown_subcommand_is_refused_with_the_list(capsys):
    assert main(["no-such-thing"]) == 2
    assert "unknown subcommand 'no-such-thing'" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: t1 {name}"), out[:200]


# `python -m MODULE ARGS`: the entry points the docs and the workflow name
ENTRY_POINTS = [
    ("t1.store.ckpt", ["--help"]),
    ("t1.store.pinning", ["--help"]),
    ("t1.run.plan", ["--help"]),
    ("t1.engine.launch", ["--help"]),
    ("t1.supervise.submit", ["--help"]),
    ("t1.bench.critic", ["--help"]),
    ("t1.tasks.fetch_real", ["--help"]),
    ("t1.cli", ["--help"]),
]


@pytest.mark.parametrize("module,args", ENTRY_POINTS, ids=[m for m, _ in ENTRY_POINTS])
def test_python_m_entry_points(module, args):
    r = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert r.returncode == 0, f"python -m {module} {' '.join(args)}: {r.stderr[-2000:]}"
    assert "usage" in (r.stdout + r.stderr).lower()


def test_python_m_config_schema_is_json():
    import json

    r = subprocess.run(
        [sys.executable, "-m", "t1.config", "--schema"], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["type"] == "object"
