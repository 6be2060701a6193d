"""Offline provisioning: the apt index writer and env (unit), and the verifier idioms running
offline inside real sandboxes (integration; needs `t1 provision` to have run).

    t1 provision && .venv/bin/pytest tests/sandbox/test_provision.py -q
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from t1.sandbox import SandboxSpec, open_sandbox
from t1.sandbox.provision import Provision, locate
from t1.sandbox.provision_build import write_apt_index


def test_env_offline_vs_network(tmp_path):
    p = Provision(tmp_path)
    off, on = p.env(network=False), p.env(network=True)
    assert off["PIP_NO_INDEX"] == "1" and off["UV_OFFLINE"] == "1" and off["UV_NO_INDEX"] == "1"
    assert off["PIP_FIND_LINKS"] == off["UV_FIND_LINKS"] == "/opt/t1/wheels"
    assert off["UV_PYTHON_DOWNLOADS"] == "never" and off["PIP_BREAK_SYSTEM_PACKAGES"] == "1"
    assert "UV_PYTHON" not in off  # it would override an activated venv
    assert "PIP_NO_INDEX" not in on and on["PATH"] == "/opt/t1/bin"


def test_locate_needs_a_complete_manifest(tmp_path):
    assert locate(tmp_path) is None
    (tmp_path / "MANIFEST.json").write_text('{"schema_version": 1, "status": "building"}')
    assert locate(tmp_path) is None
    (tmp_path / "MANIFEST.json").write_text('{"schema_version": 1, "status": "complete"}')
    assert locate(tmp_path).root == tmp_path.resolve()


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb is not installed")
def test_apt_index_of_a_real_deb(tmp_path):
    debs = sorted(Path("/var/cache/apt/archives").glob("*.deb"))
    prov = locate()
    if prov is not None:
        debs += sorted((prov.root / "apt" / "repo").glob("*.deb"))
    if not debs:
        pytest.skip("no .deb on this host to index")
    shutil.copy(debs[0], tmp_path / debs[0].name)
    assert write_apt_index(tmp_path) == 1
    text = (tmp_path / "Packages").read_text()
    assert text.startswith("Package: ")
    assert f"Filename: ./{debs[0].name}" in text
    assert f"SHA256: {hashlib.sha256(debs[0].read_bytes()).hexdigest()}" in text
    assert gzip.decompress((tmp_path / "Packages.gz").read_bytes()).decode() == text
    assert "Packages.gz" in (tmp_path / "Release").read_text()


PROV = locate()
needs_provision = pytest.mark.skipif(
    PROV is None, reason="no offline provisioning: run `t1 provision` first"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the copy-on-write root needs root")


@pytest.mark.integration
def test_missing_provision_is_said_and_sandbox_still_starts(tmp_path):
    with open_sandbox(SandboxSpec(provision=tmp_path / "none")) as sb:
        assert any("no offline provisioning" in n for n in sb.notes)
        assert sb.exec("test -e /opt/t1 || echo absent").output == "absent\n"


@pytest.mark.integration
@needs_provision
@needs_root
def test_apt_install_offline_lands_in_the_cow_layer():
    status = hashlib.sha256(Path("/var/lib/dpkg/status").read_bytes()).hexdigest()
    if shutil.which("datamash"):
        pytest.skip("datamash is installed on the host: nothing to show")
    with open_sandbox(SandboxSpec()) as sb:
        r = sb.exec(
            "apt-get install -y datamash >/tmp/apt.log 2>&1; echo rc=$?; datamash --version | head -1",
            timeout=300,
        )
        assert "rc=0" in r.output and "GNU datamash" in r.output, sb.exec(
            "tail -20 /tmp/apt.log"
        ).output
        r = sb.exec("apt-get update >/dev/null 2>&1; echo update=$?", timeout=120)
        assert r.output == "update=0\n"  # offline: the local repo is the only source
    assert shutil.which("datamash") is None
    assert hashlib.sha256(Path("/var/lib/dpkg/status").read_bytes()).hexdigest() == status


TB_V1 = """\
set -e
mkdir -p /tmp/v && cd /tmp/v
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.4.1
printf 'def test_one():\\n    assert True\\n\\ndef test_two():\\n    assert 1 + 1 == 2\\n' > test_outputs.py
uv run pytest test_outputs.py -rA
"""


@pytest.mark.integration
@needs_provision
@needs_root
def test_terminal_bench_v1_uv_idiom_offline():
    with open_sandbox(SandboxSpec()) as sb:
        r = sb.exec(TB_V1, timeout=300)
        assert r.exit_code == 0, r.output
        assert "PASSED test_outputs.py::test_two" in r.output and "2 passed" in r.output
        assert sb.exec("readlink -f $HOME/.local/bin/uv").output.startswith("/opt/t1/")


@pytest.mark.integration
@needs_provision
@needs_root
def test_uvx_uv_project_and_pip_offline():
    with open_sandbox(SandboxSpec()) as sb:
        sb.exec(
            "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh >/dev/null; source $HOME/.local/bin/env"
        )
        r = sb.exec(
            "uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --version 2>&1",
            timeout=300,
        )
        assert (
            r.exit_code == 0 and "pytest 8.4.1" in r.output and "not available offline" in r.output
        )
        r = sb.exec(
            "mkdir -p /tmp/p && cd /tmp/p && uv init -q && uv add -q pytest==8.4.1 && uv run pytest --version",
            timeout=300,
        )
        assert r.exit_code == 0 and "pytest 8.4.1" in r.output, r.output
        r = sb.exec(
            "pip install -q pytest==8.3.5 2>/dev/null; python3 -m pytest --version", timeout=300
        )
        assert "pytest 8.3.5" in r.output
        r = sb.exec("curl -s -m 2 http://127.0.0.1:9/ ; echo rc=$?")  # other URLs: the real curl
        assert r.output.strip() == "rc=7"
    assert not list(Path("/usr/local/lib").glob("python3*/dist-packages/pytest"))


# -- provisioning from tasks (t1/tasks/provision.py) ----------------------------------

from t1.sandbox.needs import script_needs  # noqa: E402
from t1.tasks.provision import (  # noqa: E402
    apt_name,
    apt_plan,
    provision_wheels,
    repo_debs,
    spec_pythons,
    summary_line,
)


def test_apt_names_and_repo_versions(tmp_path):
    assert apt_name("git=1:2.39.5-0+deb12u2") == ("git", "1:2.39.5-0+deb12u2")
    assert apt_name("jq:amd64") == ("jq", None)
    (tmp_path / "git_1%3a2.39.5-0+deb12u2_amd64.deb").write_bytes(b"")
    (tmp_path / "jq_1.6-2.1_amd64.deb").write_bytes(b"")
    assert repo_debs(tmp_path) == {"git": {"1:2.39.5-0+deb12u2"}, "jq": {"1.6-2.1"}}


def test_spec_pythons_host_always_plus_the_named_and_image_versions():
    tn = script_needs("uvx -p 3.13 -w pytest==8.4.1 pytest\npip install numpy==2.1.3\n")
    tn.from_python = "3.12"
    assert spec_pythons(tn, "3.11") == {
        "pytest==8.4.1": {"3.11", "3.13"},
        "numpy==2.1.3": {"3.11", "3.12"},
    }


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="dpkg-query is not installed")
def test_apt_plan_skips_what_the_host_or_repo_has(tmp_path):
    tn = script_needs("apt-get install -y bash surely-not-a-package-t1 jq=0.0-t1")
    tn.task = "t"
    (tmp_path / "jq_0.0-t1_amd64.deb").write_bytes(b"")
    fetch, recs = apt_plan([(tmp_path, tn)], tmp_path)
    assert fetch == ["surely-not-a-package-t1"]
    assert recs["t"] == {
        "apt_host": ["bash"],
        "apt_repo": ["jq=0.0-t1"],
        "apt_fetch": ["surely-not-a-package-t1"],
    }


LOCAL_WHEELS = PROV.root / "wheels" if PROV is not None else None


@pytest.mark.skipif(
    LOCAL_WHEELS is None or not list(LOCAL_WHEELS.glob("pytest-8.4.1-*.whl")),
    reason="no provisioned pytest 8.4.1 wheel to serve as a local index (run `t1 provision`)",
)
def test_provision_wheels_per_python_incremental_and_failures_recorded(tmp_path, monkeypatch):
    # a real `pip download`, from the provisioned wheelhouse as the only index (no network)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(LOCAL_WHEELS))
    tn = script_needs(
        "uvx -p 3.12 -w pytest==8.4.1 pytest\npip install surely-not-a-dist-t1==1.0\n"
    )
    tn.task = "t"
    recs = provision_wheels([(tmp_path, tn)], tmp_path / "wheels", "/usr/bin/python3", "3.11")
    assert recs["t"]["wheels"] == {"3.11": ["pytest==8.4.1"], "3.12": ["pytest==8.4.1"]}
    assert [f.split(":")[0] for f in recs["t"]["failed"]] == [
        "pip surely-not-a-dist-t1==1.0 (Python 3.11)"
    ]
    assert list((tmp_path / "wheels").glob("pytest-8.4.1-*.whl"))
    assert set((tmp_path / "wheels.done").read_text().split()) >= {"pytest==8.4.1", "@py3.12"}
    monkeypatch.setenv(
        "PIP_FIND_LINKS", str(tmp_path / "nowhere")
    )  # done: nothing is fetched again
    again = provision_wheels([(tmp_path, tn)], tmp_path / "wheels", "/usr/bin/python3", "3.11")
    assert again["t"]["wheels"] == recs["t"]["wheels"]
    line = summary_line("t", {**tn.record(), **recs["t"]})
    assert (
        line.startswith("FAIL t: pip 2 (py3.11 1, py3.12 1)") and "failed: pip surely-not" in line
    )


# -- FROM python:X.Y conventions in the real sandbox ------------------------------------------


def _bare_cache(root: Path) -> Path:
    """A cache with only the scripts (no wheels, uv or apt): enough for the conventions."""
    from t1.sandbox.provision import write_scripts

    root.mkdir(parents=True)
    write_scripts(root, "3.11")
    (root / "MANIFEST.json").write_text('{"schema_version": 1, "status": "complete"}')
    return root


@pytest.mark.integration
def test_python_image_python_and_pip_resolve_in_bwrap(tmp_path):
    cache = _bare_cache(tmp_path / "prov")
    show = "command -v python pip; python -c 'import sys; print(sys.executable)'; pip --version"
    spec = SandboxSpec(provision=cache, env={"T1_IMAGE_PYTHON": "3.12"})
    with open_sandbox(spec) as sb:
        r = sb.exec(show)
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        assert lines[:2] == ["/opt/t1/image/python/bin/python", "/opt/t1/image/python/bin/pip"]
        assert lines[2] == "/usr/bin/python3"  # no Python 3.12 in the cache: the host's
        assert lines[3].startswith("pip ") and "python 3.11" in lines[3]
        assert any("Python 3.12" in n and "host's python3" in n for n in sb.notes), sb.notes
    # an interpreter of that version placed in the cache is the one `python` and `pip` run
    (cache / "python" / "3.12" / "bin").mkdir(parents=True)
    (cache / "python" / "3.12" / "bin" / "python3").symlink_to("/usr/bin/python3")
    with open_sandbox(spec) as sb:
        out = sb.exec(show).output.splitlines()
        assert out[2] == "/opt/t1/python/3.12/bin/python3", out
        assert not any("Python 3.12" in n for n in sb.notes)


@pytest.mark.integration
@pytest.mark.skipif(Path("/usr/bin/python").exists(), reason="this host has a `python`")
def test_other_images_have_no_python_alias_in_bwrap(tmp_path):
    with open_sandbox(SandboxSpec(provision=_bare_cache(tmp_path / "prov"))) as sb:
        r = sb.exec("command -v python || echo none; command -v python3")
        assert r.output.splitlines() == ["none", "/usr/bin/python3"]


@pytest.mark.integration
@needs_provision
@needs_root
def test_env_path_extends_the_image_path_in_a_build(tmp_path):
    # TB2 Dockerfiles: `ENV PATH="/root/.local/bin:${PATH}"` then `RUN cp ...`; ${PATH} is the
    # base image's PATH, so the build still finds cp (it failed with `cp: not found` before)
    from t1.sandbox.envbuild import build_env

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        'FROM python:3.12-slim\nENV PATH="/root/.local/bin:${PATH}"\n'
        "RUN cp /etc/hostname /tmp/copied && python -c 'print(1)' && pip --version\n"
    )
    layer = build_env(ctx / "Dockerfile", ctx, tmp_path / "cache")
    assert layer.env["PATH"].startswith("/root/.local/bin:") and ":/usr/bin:" in layer.env["PATH"]


@needs_provision
def test_harness_site_is_built_with_its_bytecode(tmp_path):
    """The compartment binds the harness site read-only: without .pyc files every verifier run
    compiles pytest from source again (LOG.md, 2026-12-05)."""
    from t1.sandbox.hostview import harness_site

    site = harness_site(PROV.root, ["pytest"], cache=tmp_path)
    assert (site / "_pytest").is_dir()
    sources = list((site / "_pytest").glob("*.py"))
    compiled = {p.name.split(".")[0] for p in (site / "_pytest" / "__pycache__").glob("*.pyc")}
    assert sources and {p.stem for p in sources} <= compiled
