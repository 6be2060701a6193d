"""Records on disk: the one atomic writer and the one JSON-lines appender.

    from t1.records import write_json_atomic, append_json_line
    write_json_atomic("results/tiny/eval/eval.json", doc)            # + schema_version, status
    write_json_atomic(path, rows, schema_version=None, status=None)  # a list, written as is
    append_json_line("results/tiny/ppo/incidents.jsonl", {"kind": "child_hung"})

`write_atomic(path, data)` is the primitive every record write goes through: the bytes go to a
temp file in the same directory (so the rename cannot cross file systems), which is fsynced,
renamed over `path` (atomic on POSIX), and then the directory is fsynced so the rename itself
survives a power cut. A crash at any point leaves either the old file whole or the new one
whole, never a torn one; a stray `.NAME.*.tmp` is all a crash between write and rename leaves.

`write_json_atomic(path, obj)` serialises `obj` and writes it that way. A dict record gets
`schema_version` (default 1) and `status` (default "complete") in front of its own keys unless
it carries them already (then its own values stand; a conflicting explicit argument is an
error). Other JSON values (a list of rows) have nowhere to carry them: pass
`schema_version=None, status=None` to write them as they are.

`append_json_line(path, record)` appends one line with one `write()` on an O_APPEND
descriptor, so concurrent writers never interleave inside a line; readers skip a torn last line.

tests/test_records.py checks crash safety and that no other module in t1/ hand-rolls an atomic
JSON write (serialises JSON and renames in the same function).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_atomic", "write_json_atomic", "append_json_line", "fsync_dir"]

_UNSET: Any = object()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a rename or a new entry in it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Replace `path` with `data` atomically and durably (temp + fsync + rename + fsync dir).

    Creates the parent directory. On any error the temp file is removed and `path` is left as
    it was. Returns `path` as a Path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; records are meant to be read by others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def _stamp(obj: Any, schema_version: Any, status: Any) -> Any:
    if not isinstance(obj, dict):
        if schema_version is None and status is None:
            return obj
        raise TypeError(
            f"write_json_atomic: a {type(obj).__name__} has no place for schema_version/status; "
            "pass a dict, or schema_version=None, status=None to write it as is"
        )
    head: dict[str, Any] = {}
    for key, given, default in (
        ("schema_version", schema_version, 1),
        ("status", status, "complete"),
    ):
        if key in obj:
            if given is not _UNSET and given is not None and given != obj[key]:
                raise ValueError(
                    f"write_json_atomic: the record says {key}={obj[key]!r}, the caller {given!r}"
                )
            continue
        value = default if given is _UNSET else given
        if value is not None:
            head[key] = value
    return {**head, **obj} if head else obj


def replace_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Put the finished directory `tmp` (a sibling of `out`) in place of `out`: a rename when
    `out` is absent; else `out` is renamed aside, `tmp` renamed in and the old tree removed, so a
    reader sees the old directory or the new one, never a mix. Returns `out`."""
    tmp, out = Path(tmp), Path(out)
    if out.exists() or out.is_symlink():
        old = out.with_name(f".{out.name}.old.{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
    fsync_dir(out.parent)
    return out


def write_json_atomic(
    path: str | os.PathLike[str],
    obj: Any,
    *,
    schema_version: int | None = _UNSET,
    status: str | None = _UNSET,
    indent: int | None = 1,
    sort_keys: bool = False,
    default: Any = None,
) -> Path:
    """Write `obj` as JSON (one trailing newline) to `path` with `write_atomic`.

    A dict gets `schema_version` (default 1) and `status` (default "complete") unless it has
    them; None leaves a key out. `default` is json's hook for values it cannot serialise."""
    record = _stamp(obj, schema_version, status)
    text = json.dumps(record, indent=indent, sort_keys=sort_keys, default=default) + "\n"
    return write_atomic(path, text)


def append_json_line(
    path: str | os.PathLike[str], record: dict[str, Any], default: Any = str
) -> None:
    """Append `record` as one JSON line with a single O_APPEND write (creates the file)."""
    path = Path(path)
    line = (json.dumps(record, default=default) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def json_safe(x: Any) -> Any:
    """nan/inf -> None, recursively (JSON has no nan)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
