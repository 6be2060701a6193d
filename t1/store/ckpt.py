"""Atomic checkpoints: a checkpoint either exists whole and verified, or it does not count.

    from t1.store.ckpt import CheckpointManager, latest_complete
    from t1.rng import capture_rng
    mgr = CheckpointManager("results/tiny/ppo/ckpt", keep=3)
    mgr.save(step, {
        "actor": actor.state_dict(), "critic": critic.state_dict(),    # -> safetensors
        "actor_optim": a_opt.state_dict(), "critic_optim": c_opt.state_dict(),  # -> torch
        "rng": capture_rng(),                                           # -> torch
        "data": {"cursor": 17, "epoch": 2, "perm_seed": 1234},          # -> json
        "oversampling": planner.state_dict(), "counters": {...}, "metrics": [...],
    })
    ckpt = latest_complete("results/tiny/ppo/ckpt")    # newest verified one, or None
    actor_state = ckpt.load("actor")

    python -m t1.store.ckpt ROOT [--verify size]             # list checkpoints and their problems

Writing (`CheckpointManager.save`): every part goes to a file in a temporary directory
`ROOT/.tmp-step_N-HOST-PID-X`, each file fsynced as written, with its sha256 computed on the
way; `manifest.json` (schema_version, step, parts with file/format/bytes/sha256, meta) is
written and fsynced, then the directory; it is renamed to `ROOT/step_{N:08d}`, the root is
fsynced, and only then the completion marker `COMPLETE` (pinning the manifest's sha256) is
written by temp + rename + fsync. A crash at any point leaves either a `.tmp-*` directory
(ignored, cleaned later) or a step directory without `COMPLETE` (partial: reported, skipped).

Reading (`latest_complete`): step directories newest first; the first with a marker, a
manifest matching it, a known schema version and every part present with the recorded size
and checksum wins. Each one passed over on the way is logged (logger "t1.store.ckpt") and written to
the incident log (`ROOT/incidents.jsonl` unless given) as `checkpoint_partial` or
`checkpoint_corrupt`, naming the file and the problem.

Retention (keep the newest K marked checkpoints; remove older partial ones and stale temp
directories) runs on a background thread after each save; a failure there is logged and
recorded as an incident and never reaches the training loop. Deletion renames to `.trash-*`
first, so a half-deleted directory never looks like a checkpoint.

Part formats, chosen per value (or forced with `formats=`): a mapping of tensors ->
`safetensors`; bytes -> `bytes`; a value that survives a JSON round trip unchanged -> `json`;
anything else (optimizer state, RNG states, tuples, NaN) -> `torch` (loaded with
`weights_only=True`). Loading a part returns what was saved (tensors on the CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.records import fsync_dir, write_json_atomic
from t1.store.incidents import IncidentLog

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MARKER = "COMPLETE"
INCIDENTS = "incidents.jsonl"
FORMATS = {"safetensors": ".safetensors", "torch": ".pt", "json": ".json", "bytes": ".bin"}
# Conventional part names (not enforced): everything a PPO segment needs to continue bit-for-bit.
PARTS = (
    "actor",
    "critic",
    "actor_optim",
    "critic_optim",
    "rng",
    "data",
    "oversampling",
    "counters",
    "metrics",
)

_STEP_DIR = re.compile(r"^step_(\d+)$")
_PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK = 8 << 20
log = logging.getLogger("t1.store.ckpt")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the path and the problem."""


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Checkpoint:
    """One complete, verified checkpoint directory."""

    path: Path
    step: int
    manifest: dict[str, Any]

    @property
    def parts(self) -> list[str]:
        return list(self.manifest["parts"])

    @property
    def meta(self) -> dict[str, Any]:
        return self.manifest.get("meta", {})

    def load(self, name: str) -> Any:
        """The value saved as part `name` (tensors on the CPU)."""
        try:
            entry = self.manifest["parts"][name]
        except KeyError:
            raise CheckpointError(
                f"{self.path}: no part {name!r} (has: {', '.join(self.parts)})"
            ) from None
        path = self.path / entry["file"]
        fmt = entry["format"]
        if fmt == "safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        if fmt == "torch":
            import torch

            return torch.load(path, map_location="cpu", weights_only=True)
        if fmt == "json":
            return json.loads(path.read_text())
        if fmt == "bytes":
            return path.read_bytes()
        raise CheckpointError(f"{self.path / MANIFEST}: part {name!r} has unknown format {fmt!r}")

    def load_all(self) -> dict[str, Any]:
        return {name: self.load(name) for name in self.parts}


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def list_step_dirs(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of every `step_N` directory under root, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out, reverse=True)


# ----------------------------------------------------------------------------- verification


def check(path: str | os.PathLike[str], verify: str = "sha256") -> tuple[str, list[str]]:
    """Status of one checkpoint directory: ("complete" | "partial" | "corrupt", problems).

    verify: "sha256" re-hashes every part (default); "size" checks sizes only (fast, for
    multi-GB checkpoints whose disks are trusted).
    """
    path = Path(path)
    marker = path / MARKER
    if not marker.exists():
        return "partial", [f"{marker}: completion marker missing (write interrupted)"]
    try:
        mark = json.loads(marker.read_text())
        if mark.get("status") != "complete":
            return "corrupt", [f"{marker}: status is {mark.get('status')!r}, not 'complete'"]
    except (OSError, ValueError) as e:
        return "corrupt", [f"{marker}: unreadable ({e})"]
    manifest_path = path / MANIFEST
    try:
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
    except FileNotFoundError:
        return "corrupt", [f"{manifest_path}: missing"]
    except (OSError, ValueError) as e:
        return "corrupt", [f"{manifest_path}: unreadable ({e})"]
    if hashlib.sha256(raw).hexdigest() != mark.get("manifest_sha256"):
        return "corrupt", [f"{manifest_path}: sha256 differs from the one in {MARKER}"]
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return "corrupt", [
            f"{manifest_path}: schema_version {version!r} (this code reads <= {SCHEMA_VERSION})"
        ]
    problems = []
    for name, entry in manifest.get("parts", {}).items():
        f = path / entry["file"]
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            problems.append(f"{f}: missing (part {name!r})")
            continue
        if size != entry["bytes"]:
            problems.append(f"{f}: {size} bytes, manifest says {entry['bytes']}")
        elif verify == "sha256" and _sha256_file(f) != entry["sha256"]:
            problems.append(f"{f}: sha256 mismatch (part {name!r})")
    return ("corrupt", problems) if problems else ("complete", [])


_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def latest_complete(
    root: str | os.PathLike[str],
    *,
    verify: str = "sha256",
    incidents: IncidentLog | str | os.PathLike[str] | None = None,
) -> Checkpoint | None:
    """The newest complete, verified checkpoint under root, or None if there is none.

    Partial and corrupt checkpoints newer than it are logged and recorded (once per process
    and problem) in `incidents` (default ROOT/incidents.jsonl), then skipped.
    """
    root = Path(root)
    ilog = (
        incidents
        if isinstance(incidents, IncidentLog)
        else IncidentLog(incidents or root / INCIDENTS)
    )
    for step, path in list_step_dirs(root):
        status, problems = check(path, verify)
        if status == "complete":
            manifest = json.loads((path / MANIFEST).read_text())
            return Checkpoint(path=path, step=step, manifest=manifest)
        for problem in problems:
            key = (str(path), problem)
            with _reported_lock:
                if key in _reported:
                    continue
                _reported.add(key)
            log.warning("checkpoint %s is %s, skipped: %s", path, status, problem)
            ilog.write(
                f"checkpoint_{status}", path=str(path), step=step, problem=problem, action="skipped"
            )
    return None


# ----------------------------------------------------------------------------- writing


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


def _sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


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
                "sha256": _sha256_file(f),
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


# ----------------------------------------------------------------------------- retention


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune(root: str | os.PathLike[str], keep: int, stale_s: float = 3600.0) -> list[Path]:
    """Delete all but the newest `keep` marked checkpoints, partial ones older than the newest
    marked one, stale temp directories and trash; returns what was removed."""
    if keep < 1:
        raise ValueError("keep must be >= 1")
    root = Path(root)
    removed: list[Path] = []
    marked = [(s, p) for s, p in list_step_dirs(root) if (p / MARKER).exists()]
    newest = marked[0][0] if marked else None
    doomed = [p for _, p in marked[keep:]]
    if newest is not None:
        doomed += [p for s, p in list_step_dirs(root) if s < newest and not (p / MARKER).exists()]
    for p in doomed:
        trash = root / f".trash-{p.name}-{secrets.token_hex(4)}"
        try:
            os.rename(p, trash)
        except FileNotFoundError:
            continue
        shutil.rmtree(trash)
        removed.append(p)
    host = socket.gethostname()
    for p in root.iterdir() if root.is_dir() else []:
        if p.name.startswith(".trash-"):
            shutil.rmtree(p, ignore_errors=False)
            removed.append(p)
        elif p.name.startswith(".tmp-"):
            fields = p.name.rsplit("-", 3)  # .tmp-step_N, HOST, PID, X
            same_host = len(fields) == 4 and fields[1] == host
            if same_host and fields[2].isdigit():
                stale = not _pid_alive(int(fields[2]))
            else:
                stale = time.time() - p.stat().st_mtime > stale_s
            if stale:
                shutil.rmtree(p)
                removed.append(p)
    return removed


class CheckpointManager:
    """Saves checkpoints under one root and prunes old ones on a background thread.

    keep: how many complete checkpoints to keep (>= 2 recommended: the fallback if the newest
    turns out corrupt). incidents: incident log path (default ROOT/incidents.jsonl).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        keep: int = 3,
        incidents: IncidentLog | str | os.PathLike[str] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.root = Path(root)
        self.keep = keep
        self.incidents = (
            incidents
            if isinstance(incidents, IncidentLog)
            else IncidentLog(incidents or self.root / INCIDENTS)
        )
        self._cond = threading.Condition()
        self._requested = self._done = 0
        self._closed = False
        self._thread = threading.Thread(
            target=self._retention_loop, name="t1-ckpt-retention", daemon=True
        )
        self._thread.start()

    def save(
        self,
        step: int,
        parts: Mapping[str, Any],
        meta: Mapping[str, Any] | None = None,
        formats: Mapping[str, str] | None = None,
    ) -> Checkpoint:
        ckpt = write_checkpoint(self.root, step, parts, meta=meta, formats=formats)
        with self._cond:
            self._requested += 1
            self._cond.notify_all()
        return ckpt

    def latest(self, verify: str = "sha256") -> Checkpoint | None:
        return latest_complete(self.root, verify=verify, incidents=self.incidents)

    def wait_retention(self, timeout: float = 60.0) -> bool:
        """Block until every requested retention pass has run (tests, shutdown)."""
        with self._cond:
            target = self._requested
            return self._cond.wait_for(lambda: self._done >= target, timeout)

    def close(self) -> None:
        self.wait_retention()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prune_once(self) -> None:
        prune(self.root, self.keep)

    def _retention_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._requested > self._done)
                if self._closed and self._requested <= self._done:
                    return
                target = self._requested
            try:
                self._prune_once()
            except Exception as e:  # retention must never take the run down
                log.exception("checkpoint retention under %s failed", self.root)
                try:
                    self.incidents.write(
                        "retention_failed", root=str(self.root), error=repr(e), action="continue"
                    )
                except Exception:
                    log.exception("could not record the retention failure")
            with self._cond:
                self._done = target
                self._cond.notify_all()


# ----------------------------------------------------------------------------- CLI


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m t1.store.ckpt", description="list checkpoints under ROOT")
    p.add_argument("root")
    p.add_argument("--verify", choices=("sha256", "size"), default="sha256")
    args = p.parse_args(argv)
    dirs = list_step_dirs(args.root)
    if not dirs:
        print(f"{args.root}: no checkpoints")
        return 1
    for _step, path in dirs:
        status, problems = check(path, args.verify)
        print(f"{path.name}  {status}")
        for problem in problems:
            print(f"    {problem}")
    best = latest_complete(args.root, verify=args.verify, incidents=IncidentLog(None))
    print(f"newest complete: {best.path if best else 'none'}")
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(_main())
