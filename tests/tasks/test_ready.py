"""Offline readiness (t1.tasks.ready, `t1 tasks check --offline`): each missing item with its
source line and fix, wheel tags, apt on host or in the repo, sandbox.network, the report.

    .venv/bin/python -m pytest tests/tasks/test_ready.py -q

The cache here is a real directory laid out like `t1 provision` makes it; wheels are matched by
file name and tags, as pip's and uv's find-links do, so empty files with real names stand in
for downloaded wheels.
"""

from __future__ import annotations

import json
import shlex
from argparse import Namespace
from pathlib import Path

from t1.sandbox.provision import Provision
from t1.tasks import load_task
from t1.tasks.ready import Wheelhouse, manifest_record, readiness

PYTEST = "pytest-8.4.1-py3-none-any.whl"
CTRF = "pytest_json_ctrf-0.3.5-py3-none-any.whl"
GRPC_311 = "grpcio-1.73.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
GRPC_312 = "grpcio-1.73.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


def make_task(root: Path, name: str = "kv", allow_internet: bool = False, extra: str = "") -> Path:
    t = root / name
    for d in ("environment", "tests", "solution"):
        (t / d).mkdir(parents=True)
    net = "true" if allow_internet else "false"
    (t / "task.toml").write_text(
        f'[metadata]\ndifficulty = "easy"\n[environment]\nallow_internet = {net}\n'
    )
    (t / "instruction.md").write_text("build it\n")
    (t / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
    (t / "tests" / "test.sh").write_text(
        "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\n"
        "uvx -p 3.12 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest /tests/test_outputs.py\n"
    )
    (t / "solution" / "solve.sh").write_text(
        f"pip install grpcio==1.73.0\napt-get install -y bash\n{extra}"
    )
    return t


def make_cache(root: Path, wheels: list[str], tasks: dict | None = None) -> Provision:
    c = root / "prov"
    (c / "wheels").mkdir(parents=True)
    (c / "libexec").mkdir()
    (c / "libexec" / "uv").write_text("#!/bin/sh\n")
    (c / "apt" / "repo").mkdir(parents=True)
    for w in wheels:
        (c / "wheels" / w).write_bytes(b"")
    (c / "MANIFEST.json").write_text(
        json.dumps({"schema_version": 1, "status": "complete", "tasks": tasks or {}})
    )
    return Provision(c)


def test_missing_wheel_is_named_with_its_line_and_fix(tmp_path):
    task = load_task(make_task(tmp_path))
    r = readiness(task, make_cache(tmp_path, [PYTEST, CTRF]))
    assert not r.ready
    (m,) = r.missing
    assert (m.item, m.source) == ("pip grpcio==1.73.0", "solution/solve.sh:1")
    assert m.fix == f"t1 provision --tasks {shlex.quote(str(task.path))}"
    assert any("python 3.12: not provisioned" in n for n in r.notes)


def test_a_wheel_for_another_python_does_not_count(tmp_path):
    task = load_task(make_task(tmp_path))
    assert not readiness(task, make_cache(tmp_path, [PYTEST, CTRF, GRPC_312])).ready  # host is 3.11
    r = readiness(task, make_cache(tmp_path / "b", [PYTEST, CTRF, GRPC_311]))
    assert r.ready, r.missing
    assert any("no wheel for Python 3.12: grpcio==1.73.0" in n for n in r.notes)


def test_pinned_version_must_match(tmp_path):
    (tmp_path / "pytest-8.3.5.tar.gz").write_bytes(b"")  # an sdist: any Python
    (tmp_path / "Requests-2.32.5-py3-none-any.whl").write_bytes(b"")
    wh = Wheelhouse(tmp_path)
    assert wh.has("pytest", "3.11") and wh.has("pytest>=8", "3.13")
    assert not wh.has("pytest==8.4.1", "3.11")
    assert wh.has("requests==2.32.5", "3.12") and not wh.has("requests==2.32.4", "3.12")


def test_apt_on_host_in_repo_or_missing(tmp_path):
    task = load_task(make_task(tmp_path, extra="apt-get install -y datamash=1.8-1\n"))
    prov = make_cache(tmp_path, [PYTEST, CTRF, GRPC_311])
    host = {"bash": "5.2.15-2+b7", "datamash": "1.7-2"}
    r = readiness(task, prov, host_apt=host)
    assert [m.item for m in r.missing] == ["apt datamash=1.8-1"]  # the host has another version
    (prov.root / "apt" / "repo" / "datamash_1.8-1_amd64.deb").write_bytes(b"")
    assert readiness(task, prov, host_apt=host).ready
    assert [m.item for m in readiness(task, prov, host_apt={}).missing] == ["apt bash"]


def test_a_failed_fetch_says_why_instead_of_a_fix(tmp_path):
    task = load_task(make_task(tmp_path))
    rec = {task.id: {"failed": ["pip grpcio==1.73.0 (Python 3.11): No matching distribution"]}}
    (m,) = readiness(task, make_cache(tmp_path, [PYTEST, CTRF], rec)).missing
    assert m.fix.startswith("t1 provision could not fetch it: ") and "No matching" in m.fix


def test_no_cache_is_not_ready(tmp_path):
    (m,) = readiness(load_task(make_task(tmp_path)), None).missing
    assert m.item == "the offline provision cache" and m.fix.startswith("t1 provision --tasks ")


def test_network_task_honours_allow_internet_only(tmp_path):
    extra = "curl -fsSL https://example.org/data.bin -o /app/data.bin\n"
    closed = load_task(make_task(tmp_path, "closed", allow_internet=False, extra=extra))
    opened = load_task(make_task(tmp_path, "open", allow_internet=True, extra=extra))
    prov = make_cache(tmp_path, [PYTEST, CTRF, GRPC_311])
    assert [m.item for m in readiness(opened, prov, "never").missing] == [
        "downloads https://example.org/data.bin at run time"
    ]
    assert readiness(opened, prov, "task").ready
    assert not readiness(closed, prov, "task").ready


def test_cli_offline_lists_not_ready_and_exits_1(tmp_path, capsys):
    from t1.tasks.cli import main

    make_task(tmp_path / "tasks")
    prov = make_cache(tmp_path, [PYTEST, CTRF])
    out_json = tmp_path / "ready.json"
    args = Namespace(action="check", dirs=[str(tmp_path / "tasks")], offline=True,
                     provision=prov.root, network="never", json=out_json)  # fmt: skip
    assert main(args) == 1
    text = capsys.readouterr()
    assert (
        "NOT READY kv" in text.out
        and "missing pip grpcio==1.73.0 (solution/solve.sh:1) -> t1 provision --tasks" in text.out
    )
    assert "0 of 1 loadable tasks ready offline" in text.err
    assert json.loads(out_json.read_text())[0]["ready"] is False


def test_report_shows_the_excluded_tasks(tmp_path):
    task = load_task(make_task(tmp_path))
    r = readiness(task, make_cache(tmp_path, [PYTEST, CTRF]))
    pool = tmp_path / "run" / "pool" / "eval"
    pool.mkdir(parents=True)
    (pool / "manifest.json").write_text(json.dumps({"offline": manifest_record(3, [r], "never")}))
    from t1.eval.report import not_ready_section
    from t1.eval.report_html import Document
    from t1.eval.report_markdown import markdown

    text = markdown(Document("run", [not_ready_section(tmp_path / "run")]))
    assert "Pool `eval`: 1 of 3 tasks not ready" in text and "| kv | pip grpcio==1.73.0" in text


def test_pool_excludes_a_not_ready_task_with_the_count_shown(tmp_path, capsys):
    from t1.curate.pool import add_arguments, main

    tasks = tmp_path / "tasks"
    make_task(tasks, "kv")  # needs grpcio==1.73.0, which the cache lacks
    make_task(tasks, "plain").joinpath("solution", "solve.sh").write_text("echo done > /app/out\n")
    prov = make_cache(tmp_path, [PYTEST, CTRF])

    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    argv = ["--in", str(tasks), "--provision", str(prov.root), "--threshold", "1.01"]
    assert main(p.parse_args([*argv, "--out", str(tmp_path / "checked")])) == 0
    m = json.loads((tmp_path / "checked" / "manifest.json").read_text())
    assert [t["id"] for t in m["tasks"]] == ["plain"]
    assert m["counts"]["not_ready_offline"] == 1 and m["offline"]["not_ready_count"] == 1
    (row,) = m["offline"]["not_ready"]
    assert row["task"] == "kv" and row["missing"][0].startswith(
        "pip grpcio==1.73.0 (solution/solve.sh:1)"
    )
    out = capsys.readouterr().out
    assert "1 not ready offline" in out and "kv: pip grpcio==1.73.0" in out
    # the same pool without the check keeps both: the check is what moved the count
    assert (
        main(p.parse_args([*argv, "--no-offline-check", "--out", str(tmp_path / "unchecked")])) == 0
    )
    m = json.loads((tmp_path / "unchecked" / "manifest.json").read_text())
    assert sorted(t["id"] for t in m["tasks"]) == ["kv", "plain"] and "offline" not in m


def test_sandbox_network_option_changes_the_task_sandbox(tmp_path):
    import pytest

    from t1.config import ConfigError, load_config
    from t1.tasks.env import task_spec

    opened = load_task(make_task(tmp_path, "open", allow_internet=True))
    closed = load_task(make_task(tmp_path, "closed", allow_internet=False))
    assert task_spec(opened, network="task").network is True
    assert task_spec(opened, network="never").network is False  # the default
    assert task_spec(opened).network is False
    assert task_spec(closed, network="task").network is False
    # FROM python:3.12-slim: python and pip resolve in the sandbox (tests/sandbox/test_provision.py)
    assert task_spec(closed).env == {"T1_IMAGE_PYTHON": "3.12"}
    with pytest.raises(ValueError, match="never | task"):
        task_spec(opened, network="always")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sandbox:\n  network: task\n")
    assert load_config(cfg).sandbox.network == "task"
    cfg.write_text("sandbox:\n  network: always\n")
    with pytest.raises(ConfigError, match=r"c.yaml: sandbox: network must be never \| task"):
        load_config(cfg)
