"""Where bwrap sandboxes live on the host, the host tools that start them, and their removal.

root = runtime_root() / name        # $T1_SANDBOX_DIR, /dev/shm/t1-sandbox, $TMPDIR/t1-sandbox
_which("bwrap")                      # the host's binary, never one of the sandbox's
remove_tree_later(root)              # after stop(): renamed aside, deleted on a thread
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import tempfile
import threading
from pathlib import Path

from t1.sandbox.base import SandboxError
from t1.sandbox.bwrap_plan import BASE_PATH


def runtime_root() -> Path:
    """Where per-sandbox dirs (control, overlay upper/work, own workdir and logs) live.

    $T1_SANDBOX_DIR, else /dev/shm/t1-sandbox when /dev/shm is a tmpfs (metadata work costs
    nothing there, and what a sandbox writes into its copy-on-write dirs is charged to its
    memory cgroup instead of filling the host's disk), else $TMPDIR/t1-sandbox.
    """
    name = "t1-sandbox" if os.geteuid() == 0 else f"t1-sandbox-{os.geteuid()}"
    if "T1_SANDBOX_DIR" in os.environ:
        return Path(os.environ["T1_SANDBOX_DIR"])
    if _is_tmpfs(Path("/dev/shm")) and os.access("/dev/shm", os.W_OK):
        return Path("/dev/shm") / name
    return Path(tempfile.gettempdir()) / name


@functools.cache
def _is_tmpfs(path: Path) -> bool:
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if parts[1] == str(path):
                return parts[2] == "tmpfs"
    except OSError:
        pass
    return False


@functools.cache
def _which(tool: str) -> str:
    """Absolute host path of a launcher tool (the sandbox env's PATH is not the host's)."""
    path = shutil.which(tool, path=BASE_PATH)
    if path is None:
        raise SandboxError(
            f"{tool} is not installed on this host (needed to start bwrap sandboxes)"
        )
    return path


def remove_tree_later(root: Path) -> None:
    """Rename a stopped sandbox's dir aside now and delete it on a background thread.

    Deleting upper/work dirs costs tens of ms on a busy disk; stop() should not wait for it.
    A trash dir left by a process that exits first is removed by the next gc_stale.
    """
    trash = root.with_name(".trash-" + root.name)
    try:
        root.rename(trash)
    except OSError:
        trash = root
    threading.Thread(target=remove_tree, args=(trash,), name="t1-sandbox-rm", daemon=True).start()


def remove_tree(root: Path) -> None:
    """Remove a sandbox's host dir; overlay work dirs hold root-only `work/` subdirs."""
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        os.system(f"rm -rf {shlex.quote(str(root))}")  # noqa: S605 - fallback, path is ours


def copy_path(src: Path, dst: Path) -> None:
    """Copy a file or a directory tree (symlinks kept as links) to `dst`, parents made."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)
