"""Per-sandbox cgroup (pids, memory, freezer, cpu) and rlimits: the resource limits of bwrap sandboxes.

    cg = Cgroup.create("t1-abc", Limits(memory_mb=512, max_processes=64))
    sh -c "$(join_script(cg)) exec prlimit ... bwrap ..."   # joins cg before bwrap runs
    ...
    cg.kill_all(); cg.remove()                         # nothing of the sandbox survives

cgroup v1 (one hierarchy per controller, e.g. /sys/fs/cgroup/pids) and v2 (one unified
hierarchy with `cgroup.controllers`) are both handled; per controller the sandbox's group is
created under the cgroup this process already lives in (so an outer limit still applies), in
a `t1/` folder. The sandbox process joins it *before* it execs bwrap (a tiny `sh` writes its
own pid into each `cgroup.procs`), so every descendant is counted from the first fork.

RLIMIT_FSIZE is set for the sandbox (prlimit); RLIMIT_AS only when no memory controller is
available (it breaks runtimes that reserve address space); RLIMIT_NPROC only when not root,
because the kernel does not enforce it for uid 0 — the pids controller does that job.
Teardown freezes the group (where a freezer exists) before it kills, so a fork bomb cannot
outrun the kill loop, and removes the group only once it is empty.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.base import Limits, SandboxError

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup_paths() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            paths[c] = path
    return paths


def _v1_dir(controller: str) -> Path | None:
    d = CGROUP_ROOT / controller
    return d if (d / "cgroup.procs").exists() and not (d / "cgroup.controllers").exists() else None


def _v2_root() -> Path | None:
    for d in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (d / "cgroup.controllers").exists():
            return d
    return None


@dataclass
class Cgroup:
    """The cgroup directories of one sandbox (one per v1 controller, or one v2 group)."""

    name: str
    dirs: dict[str, Path] = field(default_factory=dict)  # controller -> dir ("v2" for unified)

    @classmethod
    def create(cls, name: str, limits: Limits) -> Cgroup:
        cg = cls(name)
        own = _own_cgroup_paths()
        v2 = _v2_root()
        v2_ctrls = set((v2 / "cgroup.controllers").read_text().split()) if v2 else set()
        try:
            if v2 is not None and {"pids", "memory"} <= v2_ctrls:
                cg._make("v2", v2 / own.get("", "/").lstrip("/"), limits)
            else:
                ctrls = ["pids", "memory", "freezer"] + (["cpu"] if limits.cpus else [])
                for ctrl in ctrls:
                    base = _v1_dir(ctrl)
                    if base is not None:
                        cg._make(ctrl, base / own.get(ctrl, "/").lstrip("/"), limits)
        except OSError as e:
            cg.remove()
            raise SandboxError(f"cannot create the sandbox cgroup {name}: {e}") from None
        return cg

    def _make(self, ctrl: str, parent: Path, limits: Limits) -> None:
        top = parent / "t1"
        if ctrl == "v2" and not top.exists():
            top.mkdir(exist_ok=True)
            # enable pids+memory for children of t1/ (parent must delegate them too)
            for p in (parent, top):
                try:
                    (p / "cgroup.subtree_control").write_text("+pids +memory +cpu")
                except OSError:
                    pass
        top.mkdir(exist_ok=True)
        d = top / self.name
        d.mkdir()
        self.dirs[ctrl] = d
        mem = None if limits.memory_mb is None else limits.memory_mb * 1024 * 1024
        if ctrl == "pids" and limits.max_processes is not None:
            (d / "pids.max").write_text(str(limits.max_processes))
        elif ctrl == "memory" and mem is not None:
            (d / "memory.limit_in_bytes").write_text(str(mem))
            if (d / "memory.memsw.limit_in_bytes").exists():
                (d / "memory.memsw.limit_in_bytes").write_text(str(mem))
        elif ctrl == "cpu" and limits.cpus:
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(int(limits.cpus * 100000)))
        elif ctrl == "v2":
            if limits.cpus and (d / "cpu.max").exists():
                (d / "cpu.max").write_text(f"{int(limits.cpus * 100000)} 100000")
            if limits.max_processes is not None:
                (d / "pids.max").write_text(str(limits.max_processes))
            if mem is not None:
                (d / "memory.max").write_text(str(mem))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")

    @classmethod
    def find(cls, name: str) -> Cgroup:
        """The existing group dirs named `name` (to clean up after a dead owner)."""
        cg = cls(name)
        own = _own_cgroup_paths()
        v2 = _v2_root()
        cands = [("v2", v2 / own.get("", "/").lstrip("/"))] if v2 is not None else []
        for ctrl in ("pids", "memory", "freezer", "cpu"):
            base = _v1_dir(ctrl)
            if base is not None:
                cands.append((ctrl, base / own.get(ctrl, "/").lstrip("/")))
        for ctrl, parent in cands:
            d = parent / "t1" / name
            if d.is_dir():
                cg.dirs[ctrl] = d
        return cg

    @property
    def has_memory(self) -> bool:
        return "memory" in self.dirs or "v2" in self.dirs

    @property
    def has_pids(self) -> bool:
        return "pids" in self.dirs or "v2" in self.dirs

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files():
            try:
                out.update(int(x) for x in f.read_text().split())
            except OSError:
                pass
        return out

    def kill_all(self, timeout: float = 10.0) -> bool:
        """SIGKILL every process in the group; True once the group is empty."""
        if "v2" in self.dirs and (self.dirs["v2"] / "cgroup.kill").exists():
            (self.dirs["v2"] / "cgroup.kill").write_text("1")
        freezer = self.dirs.get("freezer")
        frozen = False
        if freezer is not None and self.pids():
            try:
                (freezer / "freezer.state").write_text("FROZEN")
                frozen = True
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if frozen:
                (freezer / "freezer.state").write_text("THAWED")
                frozen = False
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        if frozen:
            (freezer / "freezer.state").write_text("THAWED")
        return True

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.dirs.clear()


def join_script(cg: Cgroup | None) -> str:
    """sh lines that move the running shell (and so all it execs and forks) into `cg`."""
    files = cg.procs_files() if cg else []
    return "".join(f'echo $$ > "{f}" || exit 125; ' for f in files)


def ulimit_script(limits: Limits, cg: Cgroup | None) -> str:
    """POSIX sh `ulimit` lines: RLIMIT_FSIZE (512-byte blocks), RLIMIT_AS (KiB) as fallback."""
    out = ""
    if limits.max_file_mb is not None:
        out += f"ulimit -f {limits.max_file_mb * 2048} || exit 125; "
    if limits.memory_mb is not None and (cg is None or not cg.has_memory):
        out += f"ulimit -v {limits.memory_mb * 1024} || exit 125; "
    return out


def rlimit_prefix(
    limits: Limits, cg: Cgroup | None, as_root: bool, nproc_only: bool = False
) -> list[str]:
    """`prlimit ... --` argv prefix for the rlimits this sandbox needs (empty if none).

    nproc_only: FSIZE and AS are set by `ulimit_script` already.
    """
    rl: list[str] = []
    if limits.max_file_mb is not None and not nproc_only:
        rl.append(f"--fsize={limits.max_file_mb * 1024 * 1024}")
    if limits.memory_mb is not None and (cg is None or not cg.has_memory) and not nproc_only:
        rl.append(f"--as={limits.memory_mb * 1024 * 1024}")
    if limits.max_processes is not None and not as_root:
        rl.append(f"--nproc={limits.max_processes}")
    return ["prlimit", *rl, "--"] if rl else []
