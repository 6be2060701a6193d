"""Checkpoint retention: keep the newest K complete checkpoints, remove the rest.

    from t1.store.ckpt_retention import CheckpointManager
    with CheckpointManager("results/tiny/ppo/ckpt", keep=3) as mgr:
        mgr.save(step, parts)          # t1.store.ckpt_write.write_checkpoint, then a prune
        ckpt = mgr.latest()            # t1.store.ckpt.latest_complete

`prune` deletes all but the newest `keep` marked checkpoints, partial ones older than the
newest marked one, stale temp directories (their writer is gone) and trash; deletion renames
to `.trash-*` first, so a half-deleted directory never looks like a checkpoint.
`CheckpointManager` runs it on a background thread after each save; a failure there is logged
and recorded as an incident and never reaches the training loop.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from t1.store.ckpt import INCIDENTS, MARKER, Checkpoint, latest_complete, list_step_dirs, log
from t1.store.ckpt_write import write_checkpoint
from t1.store.incidents import IncidentLog


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
