"""Kernel overlay mounts for the copy-on-write root of bwrap sandboxes (mount(2) via ctypes).

    ov = Overlay(lowers=[mask / "etc", Path("/etc")], merged=root / "mnt/etc",
                 upper=root / "upper/etc", work=root / "work/etc")
    mount(ov)            # ~0.5 ms; the sandbox binds ov.merged at /etc
    umount(ov.merged)    # at stop (lazy detach)
    gc_stale(runtime)    # unmount and remove sandboxes whose owner process died

One overlay per system directory (/usr, /etc, /var): an overlay of `/` itself would collide
with its own upper dir. The lower layers are stacked top first: [env layer] : [provision
layer] : secrets mask : host dir. Without an upper dir the overlay is read-only (needs two
lower layers). Mounting needs root (inside a user namespace the kernel needs `userxattr` and
cannot copy up files owned by the host's root, so bwrap then falls back to read-only binds).

The mounts live in the host's mount namespace while the sandbox runs; every sandbox dir has
an `owner` file (pid); `gc_stale` (run at each sandbox start) cleans up after a process that
was killed before its sandboxes were stopped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class MountError(OSError):
    pass


@dataclass
class Overlay:
    """One overlay mount: lowers (top first), optional upper/work, mounted at `merged`."""

    lowers: list[Path]
    merged: Path
    upper: Path | None = None
    work: Path | None = None

    def options(self) -> str:
        paths = [*self.lowers, self.merged, self.upper, self.work]
        bad = [str(p) for p in paths if p is not None and any(c in str(p) for c in " \t\n,:")]
        if bad:
            raise MountError(f"overlay paths may not contain blanks, ',' or ':': {bad[0]}")
        opts = "lowerdir=" + ":".join(str(p) for p in self.lowers)
        if self.upper is not None:
            opts += f",upperdir={self.upper},workdir={self.work}"
        return opts


def mount(ov: Overlay) -> None:
    for p in (ov.merged, ov.upper, ov.work):
        if p is not None:
            p.mkdir(parents=True, exist_ok=True)
    opts = ov.options().encode()
    if _libc.mount(b"t1-overlay", str(ov.merged).encode(), b"overlay", 0, opts) != 0:
        err = ctypes.get_errno()
        raise MountError(err, f"mount overlay at {ov.merged} ({ov.options()}): {os.strerror(err)}")


def umount(path: Path) -> None:
    """Lazily detach the mount at `path`; no error if nothing is mounted there."""
    if _libc.umount2(str(path).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT
            raise MountError(err, f"umount {path}: {os.strerror(err)}")


def mounted_under(root: Path) -> list[Path]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    out = []
    prefix = str(root).rstrip("/") + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(prefix):
            out.append(Path(point))
    return sorted(out, key=lambda p: len(p.parts), reverse=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gc_stale(runtime: Path) -> list[Path]:
    """Unmount and delete sandbox dirs under `runtime` whose owner process is gone."""
    removed = []
    try:
        entries = list(runtime.iterdir())
    except FileNotFoundError:
        return removed
    for d in entries:
        try:
            pid = int((d / "owner").read_text())
        except (OSError, ValueError):
            pid = None  # a trash dir whose removal got as far as the owner file
        if pid is None and not d.name.startswith(".trash-"):
            continue
        if pid is not None and _alive(pid):
            continue
        for m in mounted_under(d):
            umount(m)
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed
