"""put() semantics: dst becomes a copy of src (directories merge into an existing one)."""

from __future__ import annotations

import pytest
from shared_fixtures import requires_bwrap

from t1.sandbox import SandboxSpec, open_sandbox


@pytest.mark.integration
@requires_bwrap
def test_put_directory_into_existing_directory_merges_and_file_lands_by_name(tmp_path):
    src = tmp_path / "files"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.txt").write_text("B")
    single = tmp_path / "c.txt"
    single.write_text("C")
    with open_sandbox(SandboxSpec(workdir="/app")) as sb:
        sb.exec("mkdir -p /srv/data && echo old > /srv/data/keep.txt")
        sb.put(src, "/srv/data")  # staged path, outside the workdir
        sb.put(single, "/srv/data")
        sb.put(single, "/srv/other/renamed.txt")
        out = sb.exec(
            "cd /srv && find . -type f | sort && cat data/a.txt data/sub/b.txt other/renamed.txt"
        ).output
    assert out.split() == [
        "./data/a.txt",
        "./data/c.txt",
        "./data/keep.txt",
        "./data/sub/b.txt",
        "./other/renamed.txt",
        "ABC",
    ]
