"""The segment chain pattern (tests/workflow/chain: the shape of workflow/rules/ppo.smk, with a
toy trainer under the real supervisor), run by the real snakemake on this machine.

    .venv/bin/pytest tests/workflow/test_chain.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t1.store.ckpt import latest_complete

REPO = Path(__file__).resolve().parents[2]
CHAIN = REPO / "tests/workflow/chain/Snakefile"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def snakemake(workdir: Path, *args: str, **kw) -> subprocess.Popen:
    cmd = [str(BIN / "snakemake"), "-s", str(CHAIN), "-d", str(workdir), "--cores", "1", *args]
    return subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw
    )


def finish(p: subprocess.Popen, timeout: float = 180) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return out


def steps_once(workdir: Path, total: int) -> None:
    history = latest_complete(workdir / "out/ckpt").load("metrics")
    assert [s for s, _ in history] == list(range(1, total + 1))


def starts(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "out/runs.log").read_text().splitlines()]


def test_chain_runs_in_order_and_a_rerun_does_nothing(tmp_path):
    finish(snakemake(tmp_path, "--config", "segments=3", "steps=2", "step_s=0.05"))
    assert [s["until"] for s in starts(tmp_path)] == [2, 4, 6]
    steps_once(tmp_path, 6)
    out = finish(snakemake(tmp_path, "--config", "segments=3", "steps=2", "step_s=0.05"))
    assert "Nothing to be done" in out and len(starts(tmp_path)) == 3


@pytest.mark.slow
def test_killed_snakemake_rerun_continues_without_redoing_finished_segments(tmp_path):
    config = ["--config", "segments=3", "steps=3", "step_s=1.5"]
    p = snakemake(tmp_path, *config, start_new_session=True)
    end = time.time() + 120
    while not (tmp_path / "out/runs.log").exists() or not any(
        s["until"] == 6 for s in starts(tmp_path)
    ):
        assert time.time() < end and p.poll() is None, "segment 1 never started"
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)  # snakemake only: its job (segment 1) lives on as an orphan
    p.wait()
    unlock = [str(BIN / "snakemake"), "-s", str(CHAIN), "-d", str(tmp_path), "--unlock"]
    subprocess.run(unlock, env=ENV, check=True, capture_output=True)
    finish(snakemake(tmp_path, *config, "--rerun-incomplete"))
    runs = starts(tmp_path)
    assert [r["until"] for r in runs if r["until"] == 3] == [3]  # segment 0 ran once
    seg1 = [r for r in runs if r["until"] == 6]
    # the rerun of segment 1 started only after the orphan finished it: one supervisor per
    # segment (it waited on the lock, or the orphan was done before it began)
    assert seg1[0]["step"] == 3 and all(r["step"] == 6 for r in seg1[1:]), seg1
    steps_once(tmp_path, 9)
    assert runs[-1]["until"] == 9
