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
from t1.sandbox.provision import Provision, locate, write_apt_index


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
