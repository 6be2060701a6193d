"""t1.records: the one atomic record writer, the JSON-lines appender, and the guard that no
other module in t1/ hand-rolls an atomic JSON write."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from t1 import records
from t1.records import append_json_line, write_atomic, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- the writer


def test_dict_gets_schema_version_and_status_first_and_keeps_its_own(tmp_path):
    p = write_json_atomic(tmp_path / "a" / "r.json", {"x": 1})
    assert p == tmp_path / "a" / "r.json"
    assert list(json.loads(p.read_text()).items()) == [
        ("schema_version", 1),
        ("status", "complete"),
        ("x", 1),
    ]
    assert p.read_text().endswith("}\n")
    own = {"schema_version": 3, "status": "running", "x": 1}
    write_json_atomic(p, own, status="running")  # agreeing explicit value: fine
    assert json.loads(p.read_text()) == own
    write_json_atomic(p, {"x": 2}, schema_version=2, status=None)
    assert json.loads(p.read_text()) == {"schema_version": 2, "x": 2}
    with pytest.raises(ValueError, match="status='running'"):
        write_json_atomic(p, own, status="complete")
    assert json.loads(p.read_text()) == {"schema_version": 2, "x": 2}  # refused: untouched


def test_non_dict_must_say_it_carries_no_stamp(tmp_path):
    p = tmp_path / "rows.json"
    with pytest.raises(TypeError, match="schema_version=None, status=None"):
        write_json_atomic(p, [1, 2])
    assert not p.exists()
    write_json_atomic(p, [1, 2], schema_version=None, status=None)
    assert json.loads(p.read_text()) == [1, 2]


def test_unserialisable_value_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"x": 1})
    with pytest.raises(TypeError):
        write_json_atomic(p, {"x": object()})
    assert json.loads(p.read_text())["x"] == 1
    write_json_atomic(p, {"x": object()}, default=lambda o: "obj")
    assert json.loads(p.read_text())["x"] == "obj"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["r.json"]


def test_failed_rename_leaves_old_file_whole_and_removes_temp(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"v": "old"})

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(records.os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        write_json_atomic(p, {"v": "new"})
    assert json.loads(p.read_text())["v"] == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["r.json"]


def test_kill_between_write_and_rename_leaves_old_file_intact(tmp_path):
    """A real crash (os._exit, no cleanup) after the temp file is written and fsynced, before
    the rename: the record still holds the old content, whole; only a stray temp is left."""
    p = tmp_path / "r.json"
    write_json_atomic(p, {"v": "old"})
    code = textwrap.dedent(
        f"""
        import os, sys
        from t1 import records
        def die(src, dst):
            sys.stdout.write(open(src).read()); sys.stdout.flush()
            os._exit(9)
        records.os.replace = die
        records.write_json_atomic({str(p)!r}, {{"v": "new" * 1000}})
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 9, r.stderr
    assert json.loads(r.stdout)["v"] == "new" * 1000  # the temp held the whole new record
    assert json.loads(p.read_text()) == {"schema_version": 1, "status": "complete", "v": "old"}
    stray = [q.name for q in tmp_path.iterdir() if q.name != "r.json"]
    assert len(stray) == 1 and stray[0].startswith(".r.json.") and stray[0].endswith(".tmp")


def test_file_and_directory_are_fsynced(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(records.os, "fsync", spy)
    p = write_atomic(tmp_path / "r.txt", "hi")
    assert p.read_text() == "hi" and oct(p.stat().st_mode & 0o777) == "0o644"
    assert len(synced) == 2
    assert Path(synced[0]).name.startswith(".r.txt.")  # the temp file, before the rename
    assert synced[1] == str(tmp_path)  # then its directory, after it


# ----------------------------------------------------------------------------- the appender


def test_append_json_line_concurrent_writers_never_interleave(tmp_path):
    p = tmp_path / "log.jsonl"
    code = textwrap.dedent(
        f"""
        import sys
        from t1.records import append_json_line
        w = int(sys.argv[1])
        for i in range(200):
            append_json_line({str(p)!r}, {{"w": w, "i": i, "pad": "x" * 8000}})
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], cwd=ROOT) for w in range(4)]
    assert [q.wait() for q in procs] == [0] * 4
    rows = [json.loads(line) for line in p.read_text().splitlines()]
    assert len(rows) == 800
    for w in range(4):
        assert [r["i"] for r in rows if r["w"] == w] == list(range(200))
    append_json_line(p, {"t": Path("x")})  # default=str: a Path is written as its text
    assert json.loads(p.read_text().splitlines()[-1]) == {"t": "x"}


# ----------------------------------------------------------------------------- the guard


def _is_rename(call: ast.Call) -> bool:
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if isinstance(f.value, ast.Name) and f.value.id in ("os", "shutil"):
        return f.attr in ("replace", "rename", "move")
    # Path.replace(target) / Path.rename(target); str.replace(old, new) takes two
    return f.attr in ("replace", "rename") and len(call.args) == 1 and not call.keywords


def _is_json_dump(call: ast.Call) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr in ("dump", "dumps")
        and isinstance(f.value, ast.Name)
        and f.value.id == "json"
    )


def hand_rolled(source: str) -> list[str]:
    """Functions that serialise JSON and rename a file: an atomic JSON write done by hand."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
            if any(map(_is_json_dump, calls)) and any(map(_is_rename, calls)):
                out.append(f"{node.name} (line {node.lineno})")
    return out


OLD_STYLES = [
    # the shapes this replaced (reward.py, audit.py, evaluate.py, bench/sandbox.py)
    """
    def w(path, data):
        fd, tmp = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    """,
    """
    def w(path, data):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\\n")
        tmp.replace(path)
    """,
    """
    def main(args):
        text = json.dumps(res)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.rename(args.json)
    """,
]


@pytest.mark.parametrize("src", OLD_STYLES)
def test_guard_flags_a_hand_rolled_atomic_json_write(src):
    found = hand_rolled(textwrap.dedent(src))
    assert len(found) == 1 and found[0].endswith("(line 2)")


def test_guard_passes_the_writer_and_string_replace():
    ok = """
    def w(path, data):
        write_json_atomic(path, data)
        print(json.dumps(data).replace("a", "b"))
    """
    assert hand_rolled(textwrap.dedent(ok)) == []


# Directories written aside and renamed whole: the directory is the record, not a JSON file.
DIRECTORY_RECORDS = {
    "t1/agent/trajectory.py: save_trajectory": "trajectory.jsonl + .npy arrays, renamed as one dir",
}


def test_no_module_hand_rolls_an_atomic_json_write():
    offenders = []
    for path in sorted((ROOT / "t1").rglob("*.py")):
        text = path.read_text()
        if path == ROOT / "t1" / "records.py" or "json.dump" not in text:
            continue
        for fn in hand_rolled(text):
            where = f"{path.relative_to(ROOT)}: {fn.split(' (')[0]}"
            if where not in DIRECTORY_RECORDS:
                offenders.append(f"{where} ({fn.split(' (')[1]}")
    assert not offenders, "use t1.records.write_json_atomic instead:\n" + "\n".join(offenders)


def test_replace_dir_swaps_a_finished_directory_in_whole(tmp_path):
    from t1.records import replace_dir

    out = tmp_path / "out"
    for gen in ("one", "two"):
        tmp = tmp_path / f".out.{gen}"
        tmp.mkdir()
        (tmp / "a.txt").write_text(gen)
        assert replace_dir(tmp, out) == out
        assert (out / "a.txt").read_text() == gen and not tmp.exists()
    # nothing of the old generation is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
