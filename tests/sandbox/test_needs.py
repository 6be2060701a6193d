"""Extraction of install needs from task shell (t1.sandbox.needs): one fixture per form found in
the real Terminal-Bench set (workflow/real-tasks.json), each quoted from the task that uses it.

    .venv/bin/python -m pytest tests/sandbox/test_needs.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.sandbox.dockerfile import image_python
from t1.sandbox.needs import script_needs, task_needs
from t1.sandbox.shellwords import simple_commands
from t1.tasks import load_task


def pips(text: str, phase: str = "verifier") -> list[tuple[str, str | None]]:
    return sorted(
        {(n.spec, n.python) for n in script_needs(text, phase=phase).needs if n.kind == "pip"}
    )


def apts(text: str) -> list[str]:
    return script_needs(text).apt_packages()


# -- the forms of the real set ----------------------------------------------------------------


def test_uvx_with_python_and_pinned_plugins():  # TB2 test.sh, `\` continuation
    text = (
        "uvx --python 3.12 --with pytest==8.3.3 \\\n"
        "    pytest /tests/test_outputs.py -rA --tb=short \\\n"
        "    > /logs/verifier/test-stdout.txt 2>&1\n"
    )
    assert pips(text) == [("pytest==8.3.3", "3.12")]  # the tool `pytest` is the --with pin
    assert script_needs(text).python_versions() == ["3.12"]


def test_uvx_p_and_w_short_forms_and_extra_libs():
    text = (
        "uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 --with numpy==2.1.3 "
        "--with scipy==1.14.1 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA"
    )
    assert pips(text) == [
        ("numpy==2.1.3", "3.13"),
        ("pytest-json-ctrf==0.3.5", "3.13"),
        ("pytest==8.4.1", "3.13"),
        ("scipy==1.14.1", "3.13"),
    ]


def test_uvx_without_python_and_bare_tool():
    assert pips("uvx --with pytest==8.4.1 pytest -rA") == [("pytest==8.4.1", None)]
    assert pips("uvx ruff@0.6.9 check .") == [("ruff==0.6.9", None)]
    assert pips("uvx --from black==24.1.0 black .") == [("black==24.1.0", None)]


def test_uv_init_add_run():  # TB1 run-tests.sh boilerplate
    text = "uv init\nuv add pytest==8.4.1\n\nuv run pytest $TEST_DIR/test_outputs.py -rA"
    assert pips(text) == [("pytest==8.4.1", None)]
    assert not script_needs(text).unparsed


def test_uv_pip_install_and_uv_run_with():
    assert pips("uv pip install pytest==8.4.1 requests") == [
        ("pytest==8.4.1", None),
        ("requests", None),
    ]
    assert pips("uv run --with httpx==0.27.2 -p 3.11 python x.py") == [("httpx==0.27.2", "3.11")]


def test_pip_forms_with_options_redirections_and_fallbacks():
    text = (
        "pip install --no-cache-dir --retries 3 \\\n      pytest==8.4.1 \\\n"
        "      pytest-json-ctrf==0.3.5\n"
        "pip3 install --no-cache-dir pytest 2>/dev/null || pip install --no-cache-dir pytest\n"
        "pip3 install --break-system-packages -q pytest==8.4.1 2>/dev/null\n"
        "python3 -m pip install -U 'numpy>=1.26,<2' && python3.12 -m pip install grpcio==1.73.0\n"
        "sudo -H pip3 install --upgrade pip\n"
        '"$PY" -m pip install -q pytest && "$PY" -m pytest "$@"\n'  # t1 synth's test.sh
    )
    assert pips(text) == [
        ("grpcio==1.73.0", "3.12"),
        ("numpy>=1.26,<2", None),
        ("pip", None),
        ("pytest", None),
        ("pytest-json-ctrf==0.3.5", None),
        ("pytest==8.4.1", None),
    ]


def test_apt_forms():
    text = (
        "apt-get update && apt-get install -y --no-install-recommends \\\n"
        "        ca-certificates \\\n        python3=3.11.2-1+b1 \\\n        curl \\\n"
        "    && rm -rf /var/lib/apt/lists/*\n"
        "apt-get install -y curl >/dev/null 2>&1\n"
        "DEBIAN_FRONTEND=noninteractive apt-get -o Dpkg::Options::=--force-confold install -y jq\n"
        "apt install -y git=1:2.39.5-0+deb12u2\n"
    )
    assert apts(text) == [
        "ca-certificates",
        "curl",
        "git=1:2.39.5-0+deb12u2",
        "jq",
        "python3=3.11.2-1+b1",
    ]


def test_uv_installer_url_is_a_uv_need_not_a_download():
    tn = script_needs(
        "curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh\nsource $HOME/.local/bin/env"
    )
    assert [(n.kind, n.spec) for n in tn.needs] == [("uv", "0.9.7")]
    assert not tn.unsupported


def test_requirements_file_is_read_from_the_task(tmp_path):
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "requirements.txt").write_text(
        "# pinned\nflask==3.0.3\n-r extra.txt\nrequests>=2.31 ; python_version >= '3.8'\n"
    )
    (tmp_path / "environment" / "extra.txt").write_text("click==8.1.7\n")
    tn = script_needs("pip install -r requirements.txt", task_dir=tmp_path)
    assert tn.pip_specs() == [
        "click==8.1.7",
        "flask==3.0.3",
        "requests>=2.31;python_version>='3.8'",
    ]
    tn = script_needs("pip install -r missing.txt", task_dir=tmp_path)
    assert tn.pip_specs() == [] and "is not in the task" in tn.unparsed[0].why


# -- what is reported rather than guessed -----------------------------------------------------


def test_unparsed_and_unsupported_are_reported():
    tn = script_needs(
        "pip install $PKG\npip install -e .\nuv sync\nnpm install -g left-pad\n"
        "curl -fsSL https://example.org/tool.tar.gz -o /tmp/t.tgz\necho 'pip install \"x\n"
    )
    why = [i.why for i in tn.unparsed]
    assert any("shell variable" in w for w in why)
    assert any("editable install" in w for w in why)
    assert any("uv sync" in w for w in why)
    assert any("shell lexer" in w for w in why)
    assert [i.source for i in tn.unsupported] == ["script.sh:4", "script.sh:5"]
    assert tn.pip_specs() == []


def test_third_party_apt_repository_is_unsupported():  # aider_polyglot Dockerfile
    tn = script_needs(
        "apt-get update && apt-get install -y software-properties-common "
        "&& add-apt-repository ppa:deadsnakes/ppa && apt-get install -y python3.11-venv",
        phase="build",
    )
    assert [i.why.split(" (")[0] for i in tn.unsupported] == [
        "adds the apt repository ppa:deadsnakes/ppa"
    ]
    assert tn.apt_packages() == ["python3.11-venv", "software-properties-common"]


def test_build_phase_downloads_are_not_unsupported():  # builds have a network
    tn = script_needs("curl -fsSL https://github.com/x/y.zip -o /tmp/y.zip", phase="build")
    assert not tn.unsupported


def test_simple_commands_split_operators_and_redirections():
    assert simple_commands("a 2>&1 | b > out; c && d || e") == [["a"], ["b"], ["c"], ["d"], ["e"]]


@pytest.mark.parametrize(
    "image,want",
    [
        ("python:3.12-slim", "3.12"),
        ("python:3.13", "3.13"),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "3.13"),
        ("ubuntu:24.04", None),
        ("eclipse-temurin:17.0.12_7-jdk-jammy", None),
        (None, None),
    ],
)
def test_image_python(image, want):
    assert image_python(image) == want


def test_task_needs_reads_dockerfile_verifier_and_solution(tmp_path):
    t = tmp_path / "t"
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "solution").mkdir()
    (t / "task.toml").write_text('[metadata]\ndifficulty = "easy"\n')
    (t / "instruction.md").write_text("do it\n")
    (t / "environment" / "Dockerfile").write_text(
        "FROM --platform=linux/amd64 python:3.12-slim AS base\nWORKDIR /app\n"
        "RUN pip install --no-cache-dir numpy==1.26.4 \\\n    pytest==8.4.1\n"
    )
    (t / "tests" / "test.sh").write_text("uvx -p 3.13 -w pytest==8.4.1 pytest /tests -rA\n")
    (t / "solution" / "solve.sh").write_text("pip install grpcio==1.73.0\napt-get install -y jq\n")
    tn = task_needs(load_task(t))
    assert tn.from_image == "python:3.12-slim" and tn.from_python == "3.12"
    assert tn.python_versions() == ["3.12", "3.13"]
    got = {(n.phase, n.spec, n.source, n.python) for n in tn.needs if n.kind in ("pip", "apt")}
    assert got == {
        ("build", "numpy==1.26.4", "environment/Dockerfile:3", None),
        ("build", "pytest==8.4.1", "environment/Dockerfile:3", None),
        ("verifier", "pytest==8.4.1", "tests/test.sh:1", "3.13"),
        ("solution", "grpcio==1.73.0", "solution/solve.sh:1", None),
        ("solution", "jq", "solution/solve.sh:2", None),
    }
    rec = tn.record()
    assert rec["pip"] == ["grpcio==1.73.0", "numpy==1.26.4", "pytest==8.4.1"] and rec["apt"] == [
        "jq"
    ]


def test_seed_tasks_have_nothing_unparsed():
    from t1.tasks import find_tasks

    root = Path(__file__).resolve().parents[2] / "workflow" / "tasks"
    for p in find_tasks([root]):
        tn = task_needs(load_task(p))
        assert not tn.unparsed and not tn.unsupported, (p, tn.unparsed, tn.unsupported)


def test_task_image_python_reads_the_first_from(tmp_path):
    from t1.sandbox.needs import task_image_python

    t = tmp_path / "t"
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "solution").mkdir()
    (t / "solution" / "solve.sh").write_text("true\n")
    (t / "task.toml").write_text("[metadata]\n")
    (t / "instruction.md").write_text("x\n")
    (t / "tests" / "test.sh").write_text("true\n")
    (t / "environment" / "Dockerfile").write_text("# c\nfrom python:3.13-slim-bookworm\nRUN true\n")
    assert task_image_python(load_task(t)) == "3.13"
    (t / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    assert task_image_python(load_task(t)) is None
