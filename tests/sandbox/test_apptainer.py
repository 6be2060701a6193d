"""Apptainer backend: argument lists and Dockerfile conversion everywhere; the real run where
the `apptainer` binary exists.

    .venv/bin/pytest tests/sandbox/test_apptainer.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.sandbox import SandboxSpec, open_sandbox
from t1.sandbox.apptainer import (
    bind_args,
    build_args,
    dockerfile_to_definition,
    exec_args,
    have_apptainer,
    image_key,
    instance_start_args,
    instance_stop_args,
    pull_args,
)
from t1.sandbox.base import Limits, SandboxError


def test_instance_start_isolation_flags(tmp_path):
    binds = [(tmp_path / "w", "/app", False), (tmp_path / "ctl", "/run/t1", True)]
    a = instance_start_args(SandboxSpec(), "t1-x", "/img.sif", binds)
    assert a[:3] == ["apptainer", "instance", "start"]
    for flag in ("--containall", "--cleanenv", "--net", "--writable-tmpfs"):
        assert flag in a
    assert a[a.index("--network") + 1] == "none"
    assert a[-2:] == ["/img.sif", "t1-x"]
    assert f"{tmp_path}/w:/app" in a and f"{tmp_path}/ctl:/run/t1:ro" in a
    assert "--memory" not in a  # cgroups only when the site delegates them


def test_instance_start_network_and_cgroups():
    spec = SandboxSpec(network=True, limits=Limits(memory_mb=256, max_processes=32, cpus=2))
    a = instance_start_args(spec, "n", "img.sif", [], cgroups=True)
    assert "--network" not in a and "--net" not in a
    assert a[a.index("--memory") + 1] == "256M" and a[a.index("--pids-limit") + 1] == "32"
    assert a[a.index("--cpus") + 1] == "2"


def test_exec_stop_pull_build_args(tmp_path):
    a = exec_args("t1-x", "/app", {"B": "2", "A": "1"}, ["/bin/sh", "-c", "true"])
    assert a[:4] == ["apptainer", "exec", "--cleanenv", "--pwd"]
    assert a[a.index("instance://t1-x") :] == ["instance://t1-x", "/bin/sh", "-c", "true"]
    assert a.index("A=1") < a.index("B=2")
    assert instance_stop_args("t1-x") == ["apptainer", "instance", "stop", "--force", "t1-x"]
    assert pull_args("python:3.11", tmp_path / "p.sif")[-1] == "docker://python:3.11"
    assert pull_args("docker://python:3.11", tmp_path / "p.sif")[-1] == "docker://python:3.11"
    assert build_args(tmp_path / "b.sif", tmp_path / "d.def")[:3] == [
        "apptainer",
        "build",
        "--fakeroot",
    ]
    with pytest.raises(SandboxError):
        bind_args([(Path("/a:b"), "/x", False)])
    assert image_key([b"a"]) != image_key([b"b"])


def test_dockerfile_conversion_with_spython(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("x")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-slim\nENV APP=/app\nWORKDIR /app\nCOPY data /app/data\n"
        'RUN apt-get update && apt-get install -y jq\nCMD ["bash"]\n'
    )
    d = dockerfile_to_definition(tmp_path / "Dockerfile", tmp_path)
    assert "Bootstrap: docker" in d and "From: python:3.11-slim" in d
    assert "%post" in d and "apt-get install -y jq" in d
    assert f"{tmp_path}/data /app/data" in d  # %files sources made absolute
    assert "export APP=/app" in d


@pytest.mark.apptainer
@pytest.mark.skipif(
    not have_apptainer(), reason="apptainer is not installed (not installable on this machine)"
)
def test_real_instance_exec_put_get(tmp_path):
    spec = SandboxSpec(image="docker://debian:bookworm-slim", host_workdir=tmp_path / "w")
    with open_sandbox(spec, backend="apptainer") as sb:
        assert sb.exec("cd /tmp && X=1").exit_code == 0
        assert sb.exec("echo $X; pwd").output == "1\n/tmp\n"
        assert sb.exec("sleep 100", timeout=1).timed_out
        (tmp_path / "f").write_text("hi")
        sb.put(tmp_path / "f", "/tmp/f")
        sb.get("/tmp/f", tmp_path / "g")
        assert (tmp_path / "g").read_text() == "hi"


def test_apptainer_missing_is_a_clear_error():
    if have_apptainer():
        pytest.skip("apptainer is installed here")
    with pytest.raises(SandboxError, match="apptainer is not installed"):
        open_sandbox(SandboxSpec(), backend="apptainer")
