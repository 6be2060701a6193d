"""Dockerfile parsing and substitution for the bwrap environment build (pure functions).

.venv/bin/pytest tests/sandbox/test_dockerfile.py -q
"""

from __future__ import annotations

import pytest

from t1.sandbox.envbuild import (
    EnvBuildError,
    content_key,
    copy_args,
    exec_form,
    parse_dockerfile,
    parse_kv,
    substitute,
)

DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM python:3.13-slim-bookworm

ARG VERSION=1.2
ENV A=1 \\
    B="two words"
# a comment inside a continuation
WORKDIR /app
RUN apt-get update && \\
    # comment between continuation lines
    apt-get install -y jq
COPY --chown=root:root data/ /app/data/
CMD ["bash"]
"""


def test_parse_joins_continuations_and_drops_comments():
    ins = parse_dockerfile(DOCKERFILE, "Dockerfile")
    assert [i.cmd for i in ins] == ["FROM", "ARG", "ENV", "WORKDIR", "RUN", "COPY", "CMD"]
    run = ins[4]
    assert run.line == 9
    assert run.args == "apt-get update && apt-get install -y jq"
    assert ins[2].args == 'A=1 B="two words"'


def test_unsupported_instruction_names_file_and_line():
    with pytest.raises(
        EnvBuildError, match=r"tasks/x/Dockerfile:3: unsupported instruction ONBUILD"
    ):
        parse_dockerfile("FROM a\nRUN true\nONBUILD RUN x\n", "tasks/x/Dockerfile")
    with pytest.raises(EnvBuildError, match=r"Dockerfile:2: unsupported instruction SHELL"):
        parse_dockerfile('FROM a\nSHELL ["/bin/bash", "-c"]\n', "Dockerfile")


def test_substitute_forms():
    v = {"A": "1", "EMPTY": ""}
    assert substitute("$A-${A}-${B:-dflt}-${A:+alt}-${EMPTY:+alt}-\\$A", v) == "1-1-dflt-alt--$A"


def test_parse_kv_forms():
    assert parse_kv('A=1 B="two words" C=', "D", 1) == {"A": "1", "B": "two words", "C": ""}
    assert parse_kv("LEGACY some value here", "D", 1) == {"LEGACY": "some value here"}
    assert parse_kv("NAME", "D", 1) == {"NAME": ""}


def test_exec_form_and_copy_args():
    assert exec_form('["echo", "hi there"]') == ["echo", "hi there"]
    assert exec_form("echo hi") is None
    assert copy_args("--chown=1:1 a b /dst/", "D", 1) == (["a", "b"], "/dst/", {"chown": "1:1"})
    assert copy_args('["a b", "/dst"]', "D", 1) == (["a b"], "/dst", {})
    with pytest.raises(EnvBuildError, match="D:4: COPY --from"):
        copy_args("--from=builder /x /y", "D", 4)


def test_content_key_covers_dockerfile_and_context(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN true\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f").write_text("1")
    k1 = content_key(tmp_path / "Dockerfile", tmp_path)
    assert content_key(tmp_path / "Dockerfile", tmp_path) == k1
    (tmp_path / "data" / "f").write_text("2")
    k2 = content_key(tmp_path / "Dockerfile", tmp_path)
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN false\n")
    assert len({k1, k2, content_key(tmp_path / "Dockerfile", tmp_path)}) == 3
