"""Apptainer definition files (containers/*.def): they parse, and hold what the workflow needs.

.venv/bin/pytest tests/workflow/test_containers.py -q
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from spython.main.parse.parsers import SingularityParser

REPO = Path(__file__).resolve().parents[2]
DEFS = sorted((REPO / "containers").glob("*.def"))


def sections(path: Path) -> dict[str, str]:
    """Section name -> body, straight from the text (what `apptainer build` reads)."""
    parts = re.split(r"(?m)^%(\w+)\s*$", path.read_text())
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_both_images_are_defined():
    assert [p.name for p in DEFS] == ["sandbox.def", "trainer.def"]


@pytest.mark.parametrize("path", DEFS, ids=lambda p: p.name)
def test_definition_parses_with_the_sections_a_build_needs(path):
    (recipe,) = SingularityParser(str(path)).recipe.values()  # one stage
    assert recipe.fromHeader, f"{path}: no From:"
    assert recipe.install, f"{path}: no %post"
    assert recipe.environ, f"{path}: no %environment"
    assert recipe.cmd or recipe.entrypoint, f"{path}: no %runscript"
    assert {"post", "environment", "runscript", "labels", "help", "test"} <= set(sections(path))
    assert path.read_text().startswith("Bootstrap: docker\nFrom: ")


def test_trainer_image_has_the_stack_and_the_package():
    text = (REPO / "containers/trainer.def").read_text()
    post = sections(REPO / "containers/trainer.def")["post"]
    for package in ("torch", "sglang", "megatron-core", "/opt/t1/src"):
        assert package in post, package
    files = sections(REPO / "containers/trainer.def")["files"].split()
    assert files[:2] == ["pyproject.toml", "/opt/t1/src/pyproject.toml"] and "t1" in files
    assert "exec t1" in sections(REPO / "containers/trainer.def")["runscript"]
    assert "ubuntu24.04" in text  # Python 3.12: megatron-core >= 0.17 needs it


def test_sandbox_image_runs_verifiers():
    post = sections(REPO / "containers/sandbox.def")["post"]
    assert "python3" in post and "pytest" in post and "bash" in post


def test_readme_names_the_build_commands():
    readme = (REPO / "containers/README.md").read_text()
    for path in DEFS:
        assert (
            f"apptainer build --fakeroot containers/{path.stem}.sif containers/{path.name}"
            in readme
        )
    assert "software-deployment-method: apptainer" in readme


@pytest.mark.apptainer
@pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer is not installed")
def test_sandbox_image_builds(tmp_path):
    out = tmp_path / "sandbox.sif"
    r = subprocess.run(
        ["apptainer", "build", "--fakeroot", str(out), str(REPO / "containers/sandbox.def")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(["apptainer", "test", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
