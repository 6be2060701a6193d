"""Environment build from a Dockerfile as a cached copy-on-write layer, and `t1 sandbox run`.

.venv/bin/pytest tests/sandbox/test_envbuild.py -m integration -q
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from t1.sandbox import SandboxSpec, open_sandbox
from t1.sandbox.envbuild import EnvBuildError, build_env

pytestmark = [pytest.mark.integration]

if os.geteuid() != 0:
    pytest.skip("the copy-on-write root needs root", allow_module_level=True)


def test_build_apply_and_cache(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "data").mkdir(parents=True)
    (ctx / "data" / "input.csv").write_text("a,b\n1,2\n")
    (ctx / "Dockerfile").write_text(
        "FROM python:3.13-slim-bookworm\n"
        "ARG NAME=t1\n"
        'ENV GREETING="hello $NAME" TOOL_HOME=/opt/tool\n'
        "WORKDIR /app\n"
        "COPY data /app/data\n"
        "COPY data/input.csv $TOOL_HOME/\n"
        'RUN echo "$GREETING" > greeting.txt && mkdir -p /usr/local/share/t1-envtest && \\\n'
        "    echo built > /usr/local/share/t1-envtest/marker && echo rootfile > /root/.t1-envtest\n"
        'CMD ["bash"]\n'
    )
    cache = tmp_path / "cache"
    layer = build_env(ctx / "Dockerfile", ctx, cache)
    assert not layer.cached and layer.workdir == "/app"
    assert layer.env == {"GREETING": "hello t1", "TOOL_HOME": "/opt/tool"}
    assert "approximated by the host root" in (layer.path / "build.log").read_text()
    again = build_env(ctx / "Dockerfile", ctx, cache)
    assert again.cached and again.path == layer.path  # second build: cache hit
    with open_sandbox(
        SandboxSpec(workdir="/app", env_layer=layer.path, host_workdir=tmp_path / "w")
    ) as sb:
        r = sb.exec(
            "pwd; cat greeting.txt data/input.csv /opt/tool/input.csv /usr/local/share/t1-envtest/marker /root/.t1-envtest; echo $GREETING"
        )
    assert r.output == "/app\nhello t1\na,b\n1,2\na,b\n1,2\nbuilt\nrootfile\nhello t1\n"
    assert not Path("/usr/local/share/t1-envtest").exists()  # the host never changes
    assert (tmp_path / "w" / "greeting.txt").exists()  # the workdir is seeded from the layer
    (ctx / "data" / "input.csv").write_text("changed\n")
    assert build_env(ctx / "Dockerfile", ctx, cache).path != layer.path  # context is in the key


def test_failing_run_names_the_line(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN true\nRUN echo oops && exit 3\n")
    with pytest.raises(EnvBuildError, match=r"Dockerfile:3: failed with exit code 3"):
        build_env(tmp_path / "Dockerfile", tmp_path, tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]


def test_cli_sandbox_run(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "in.txt").write_text("data\n")
    cmd = [
        sys.executable,
        "-m",
        "t1.cli",
        "sandbox",
        "run",
        "--workdir",
        str(work),
        "--",
        "cat in.txt; echo out > o.txt; exit 3",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and r.stdout.startswith("data\n")
    assert (work / "o.txt").read_text() == "out\n"
    r = subprocess.run(
        [*cmd[:5], "--timeout", "1", "--", "sleep", "30"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 124


def test_run_adduser_in_build(tmp_path):
    """`adduser` in a RUN (a real TB task's Dockerfile): groupadd rewrites the synthesized
    /etc/gshadow, adduser chowns the home it made (env builds keep CAP_CHOWN, agents do not)."""
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.12-slim\n"
        'RUN adduser --disabled-password --gecos "" t1_restricted && id t1_restricted\n'
    )
    layer = build_env(tmp_path / "Dockerfile", tmp_path, tmp_path / "cache")
    with open_sandbox(SandboxSpec(env_layer=layer.path, host_workdir=tmp_path / "w")) as sb:
        r = sb.exec(
            "stat -c %U /home/t1_restricted; grep -c '^t1_restricted:!' /etc/shadow; "
            "chown t1_restricted /tmp 2>&1 | grep -c 'not permitted'"
        )
    assert r.output.split() == ["t1_restricted", "1", "1"], r.output
