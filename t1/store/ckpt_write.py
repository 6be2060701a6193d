"""Writing a checkpoint atomically (the protocol: t1/store/ckpt.py's docstring).

    from t1.store.ckpt_write import write_checkpoint
    ckpt = write_checkpoint(ROOT, step, {"actor": state_dict, "data": {...}}, meta={...})

`write_checkpoint` puts every part in a temporary directory (`begin_checkpoint`), each file
fsynced as written with its sha256 computed on the way, then `seal_checkpoint` writes the
manifest, renames the directory to ROOT/step_N and writes the completion marker. Several
processes may write parts into one temporary directory and one of them seal it (the per-rank
checkpoints of t1.train.megatron.checkpoint). `format_of` picks a part's format.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from t1.records import fsync_dir, write_json_atomic
from t1.store.ckpt import (
    _CHUNK,
    FORMATS,
    MANIFEST,
    MARKER,
    SCHEMA_VERSION,
    Checkpoint,
    CheckpointError,
    log,
    sha256_file,
    step_dir_name,
)

_PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class _HashingWriter:
    """File-like: every write goes to the file and into a sha256."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha, self.n = f, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for i in range(0, len(view), _CHUNK):
            chunk = view[i : i + _CHUNK]
            self.f.write(chunk)
            self.sha.update(chunk)
        self.n += len(view)
        return len(view)

    def flush(self) -> None:
        self.f.flush()


def _is_json_exact(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError, RecursionError):
        return False


def format_of(value: Any) -> str:
    """The part format `save` picks for a value (see the module docstring)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, Mapping) and value and all(_is_tensor(v) for v in value.values()):
        return "safetensors"
    if _is_json_exact(value):
        return "json"
    return "torch"


def _is_tensor(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _safetensors_bytes(tensors: Mapping[str, Any]) -> bytes:
    from safetensors.torch import save

    seen: set[int] = set()
    flat = {}
    for k, v in tensors.items():
        t = v.detach().cpu().contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen and t.numel():  # tied weights: safetensors refuses shared storage
            t = t.clone()
        seen.add(ptr)
        flat[str(k)] = t
    return save(flat)


def _write_part(path: Path, fmt: str, value: Any) -> tuple[int, str]:
    with open(path, "wb") as f:
        w = _HashingWriter(f)
        if fmt == "safetensors":
            w.write(_safetensors_bytes(value))
        elif fmt == "torch":
            import torch

            torch.save(value, w)
        elif fmt == "json":
            w.write(json.dumps(value).encode())
        elif fmt == "bytes":
            w.write(value)
        else:
            raise CheckpointError(f"{path}: unknown format {fmt!r} (known: {', '.join(FORMATS)})")
        f.flush()
        os.fsync(f.fileno())
    return w.n, w.sha.hexdigest()


def write_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    parts: Mapping[str, Any],
    *,
    meta: Mapping[str, Any] | None = None,
    formats: Mapping[str, str] | None = None,
) -> Checkpoint:
    """Write ROOT/step_{step:08d} atomically (see the module docstring) and return it.

    An existing directory for the same step (a partial one from a crash, or a complete one
    being redone after a resume) is moved aside and replaced; its removal is left to retention.
    """
    tmp = begin_checkpoint(root, step)
    entries: dict[str, dict[str, Any]] = {}
    for pname, value in parts.items():
        if not _PART_NAME.match(pname) or pname in (MANIFEST, MARKER):
            raise CheckpointError(f"{tmp}: bad part name {pname!r} (letters, digits, _ . - only)")
        fmt = (formats or {}).get(pname) or format_of(value)
        file = pname + FORMATS.get(fmt, "")
        nbytes, sha = _write_part(tmp / file, fmt, value)
        entries[pname] = {"file": file, "format": fmt, "bytes": nbytes, "sha256": sha}
    return seal_checkpoint(root, step, tmp, entries, meta=meta)


def begin_checkpoint(root: str | os.PathLike[str], step: int) -> Path:
    """A fresh temporary directory ROOT/.tmp-step_N-... for the parts of checkpoint `step`
    (several processes may write into it; `seal_checkpoint` makes it count)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = step_dir_name(step)
    tmp = root / f".tmp-{name}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    return tmp


def seal_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    tmp: Path,
    entries: Mapping[str, dict[str, Any]] | None = None,
    *,
    meta: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Manifest, rename to ROOT/step_N, completion marker (see the module docstring). Without
    `entries`, every `*.bin` file already written (and fsynced) in `tmp` is a `bytes` part
    (used by t1.train.megatron.checkpoint: one file per rank)."""
    root, tmp = Path(root), Path(tmp)
    name = step_dir_name(step)
    if entries is None:
        entries = {}
        for f in sorted(tmp.glob("*" + FORMATS["bytes"])):
            entries[f.name[: -len(FORMATS["bytes"])]] = {
                "file": f.name, "format": "bytes", "bytes": f.stat().st_size,
                "sha256": sha256_file(f),
            }  # fmt: skip
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "step": step,
        "created": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "parts": dict(entries),
        "meta": dict(meta or {}),
    }
    write_json_atomic(tmp / MANIFEST, manifest)
    manifest_sha256 = hashlib.sha256((tmp / MANIFEST).read_bytes()).hexdigest()  # as on disk
    fsync_dir(tmp)
    final = root / name
    if final.exists():
        old = root / f".trash-{name}-{secrets.token_hex(4)}"
        os.rename(final, old)
        log.info(
            "checkpoint %s existed; replaced (old copy at %s until retention runs)", final, old
        )
    os.rename(tmp, final)
    fsync_dir(root)
    marker = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "step": step,
        "manifest_sha256": manifest_sha256,
    }
    write_json_atomic(final / MARKER, marker, indent=None)
    return Checkpoint(path=final, step=step, manifest=manifest)
