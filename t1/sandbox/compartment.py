"""The verifier's compartment: a second bwrap over the agent's filesystem, none of its processes.

    from t1.sandbox.compartment import run_compartment
    stopped = stop_agent(sandbox.cgroup, sandbox.shell.proc.pid)   # t1.sandbox.agent_stop
    site = harness_site(provision_root, ["pytest==8.4.1", "requests"])  # t1.sandbox.hostview
    run = run_compartment(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir,
                          timeout=120, netns_fd=stopped.netns_fd, site_dir=site)
    run.records, run.output, run.timed_out

t1.verify.hardened uses this; there is no command of its own (`t1 oracle` exercises it).
Stopping the agent first (services aside): t1.sandbox.agent_stop; the host's own system
inside the compartment and the harness's pytest site: t1.sandbox.hostview.

The compartment is `bwrap` started by this process (host binaries, never a file of the
sandbox) in a new pid (or the agent's, below), ipc, uts and mount namespace, and in the agent's network namespace, so
the services answer on localhost (`nsenter --net`, entered before bwrap execs, so nothing
is looked up in the sandbox's mount namespace; not root: a network namespace of its own). It
binds the agent's filesystem (the /usr, /etc, /var overlays, the workdir, /tmp, /root, /home,
/logs) where the agent had it, and over it, privately: /logs/verifier (a fresh host dir), /run/t1/host/{usr,etc} (the host's own read-only
system, for the harness), /run/t1/harness (runner, pytest site; read-only), an empty
/etc/ld.so.preload and the host's /etc/nsswitch.conf (both are read by the dynamic loader
and libc of every process, the harness included). All capabilities dropped but CAP_SETUID
and CAP_SETGID (as root: tests may run the agent's program as a task's unprivileged user, e.g.
android-piezo-haptic-*; neither reaches the harness: reading its fds or memory needs
CAP_SYS_PTRACE, it is non-dumpable), /run/t1 searchable and the harness's TMPDIR sticky
world-writable like /tmp, a cgroup of its own (killed whole when the verifier ends),
`--die-with-parent`.

Its root is private (as root; `private_root`): an overlay mounted on the host whose top layer
holds a fresh copy of the task's tests as an opaque /tests, over the agent's root (when it
has one: an env layer's rootfs), with an upper dir of its own; /tests itself is bound
read-only from there (the task's script runs the agent's code before pytest collects: nothing
may rewrite the tests). Nothing the agent or a service puts in its own /tests shows through,
and what the verifier writes at / never reaches the agent. The overlay is unmounted and
removed when the verifier ends. Not root: /tests is a read-only bind of the copy.

With `pidns_fd` (services survived: t1.sandbox.agent_stop) the compartment has no pid
namespace of its own: `bwrap --pidns FD` puts it in the agent's, with that namespace's /proc,
so tests see the services under the pids the agent saw.

The outcome channel is a pipe: its write end is passed to the compartment as one fd (the
harness makes it non-inheritable at once), its read end stays here.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from t1.sandbox import mask as maskmod
from t1.sandbox import overlay as ovl
from t1.sandbox.base import Limits
from t1.sandbox.bwrap_plan import host_symlinks, system_dir_binds
from t1.sandbox.hostview import HOST_VIEW
from t1.sandbox.limits import Cgroup, join_script
from t1.sandbox.overlay import Overlay
from t1.sandbox.runtime import _which

log = logging.getLogger(__name__)

HARNESS_INSIDE = "/run/t1/harness"
TMP_INSIDE = "/run/t1/tmp"  # the harness's TMPDIR (tests still see the agent's /tmp)


def masked_in_layer(mask_dir: Path, host_root: Path, tops: tuple[str, ...]) -> list[str]:
    """Paths (relative to the root) under `tops` that the mask layer replaces because the host's
    own is a secret (not world-readable): the layer's empty file or opaque directory is bound
    over each. The layer is small (it holds only replacements and their parents), so walking it
    costs nothing next to `mask.secret_paths`' walk of the host."""
    out: list[str] = []
    for top in tops:
        base = mask_dir / top
        for dirpath, dirnames, filenames in os.walk(base):
            keep = []
            for name in [*dirnames, *filenames]:
                rel = os.path.relpath(os.path.join(dirpath, name), mask_dir)
                try:
                    st = os.lstat(host_root / rel)
                except OSError:
                    continue  # the layer's own files (synthesized, SANDBOX_FILES): not a secret
                if stat.S_ISLNK(st.st_mode):
                    continue
                if not maskmod.world_readable(st):
                    out.append(rel)
                elif name in dirnames:
                    keep.append(name)
            dirnames[:] = keep
    return sorted(out)


def compartment_args(
    plan,
    spec,
    as_root: bool,
    tests_dir: Path,
    vlogs_dir: Path,
    harness_dir: Path,
    share_net: bool,
    site_dir: Path | dict[str, Path] | None = None,
    host_root: Path = Path("/"),
    root_dir: Path | None = None,
    mask_dir: Path | None = None,
    share_pid: bool = False,
) -> list[str]:
    """bwrap argv of the verifier compartment over the agent sandbox `plan` (pure).

    mask_dir: the secrets mask layer (t1.sandbox.mask); its replacements are bound over the
    host view's secrets (HOST_VIEW/{usr,etc}), so the tests see no host secret there either.

    root_dir: the private root (`private_root`'s merged dir, /tests inside); else the agent's
    root (if any) and /tests a bind of `tests_dir`; either way /tests is read-only.

    share_pid: no pid namespace of its own: the caller adds `--pidns FD` (the agent's, where
    its services run), so the tests see them under the pids the agent saw.
    site_dir: one dir bound at HARNESS_INSIDE/site, or {name: dir} bound at HARNESS_INSIDE/name."""
    a = ["bwrap", "--die-with-parent", "--cap-drop", "ALL"]
    if as_root:  # tests may drop to a task's unprivileged user (preexec setgid/setuid)
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    a += ([] if share_pid else ["--unshare-pid"]) + ["--unshare-ipc", "--unshare-uts"]
    if not share_net:
        a.append("--unshare-net")
    if not as_root:
        a += ["--unshare-user", "--uid", "0", "--gid", "0"]
    a += ["--hostname", spec.hostname]
    root = plan.overlays["/"].merged if "/" in plan.overlays else None
    if root_dir is not None:
        root = root_dir
    if root is not None:
        a += ["--bind", str(root), "/"]
    a += system_dir_binds(plan, host_root)
    for name, target in host_symlinks(host_root).items():
        if root is None or not os.path.lexists(root / name):  # the agent's bwrap made it there
            a += ["--symlink", target, f"/{name}"]
    a += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/run"]
    shared = getattr(plan, "shared", {}) or {}
    for inside in ("/tmp", "/root", "/home"):
        if inside in shared:
            a += ["--bind", str(shared[inside]), inside]
        else:
            a += ["--tmpfs", inside] if inside == "/tmp" else ["--dir", inside]
    if plan.provision is not None:
        a += ["--ro-bind", str(plan.provision), "/opt/t1"]
    if plan.workdir_host is not None:
        a += ["--bind", str(plan.workdir_host), spec.workdir]
    if plan.logs_host is not None:
        a += ["--bind", str(plan.logs_host), "/logs"]
    a += ["--bind", str(vlogs_dir), "/logs/verifier"]
    # read-only to the script, the tests and every process they start (the script runs the
    # agent's code before pytest collects)
    a += ["--ro-bind", str(root_dir / "tests" if root_dir is not None else tests_dir), "/tests"]
    # /run/t1 searchable and the harness's TMPDIR world-writable (sticky) as /tmp is: tests
    # that drop to an unprivileged user run their temp files from there
    a += ["--perms", "0755", "--dir", "/run/t1"]
    a += ["--ro-bind", str(host_root / "usr"), f"{HOST_VIEW}/usr"]
    a += ["--ro-bind", str(host_root / "etc"), f"{HOST_VIEW}/etc"]
    if mask_dir is not None:
        for rel in masked_in_layer(mask_dir, host_root, ("usr", "etc")):
            a += ["--ro-bind", str(mask_dir / rel), f"{HOST_VIEW}/{rel}"]
    a += ["--ro-bind", str(harness_dir), HARNESS_INSIDE, "--perms", "1777", "--dir", TMP_INSIDE]
    sites = {"site": site_dir} if isinstance(site_dir, Path) else (site_dir or {})
    for name, d in sites.items():
        a += ["--ro-bind", str(d), f"{HARNESS_INSIDE}/{name}"]
    a += ["--ro-bind", "/dev/null", "/etc/ld.so.preload"]
    if (host_root / "etc/nsswitch.conf").is_file():
        a += ["--ro-bind", str(host_root / "etc/nsswitch.conf"), "/etc/nsswitch.conf"]
    a += ["--chdir", spec.workdir]
    return a


def clear_mount_points(plan) -> None:
    """Make /logs/verifier and /tests plain empty dirs of the agent's filesystem again.

    They are the verifier's (Terminal-Bench removes both before it copies the tests in); a
    symlink or file the agent left there would redirect or break the compartment's binds.
    """
    spots = []
    if plan.logs_host is not None:
        spots.append(Path(plan.logs_host) / "verifier")
    if "/" in plan.overlays:
        spots.append(Path(plan.overlays["/"].merged) / "tests")
    for p in spots:
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        p.mkdir(exist_ok=True)


def private_root(plan, tests_dir: Path) -> Overlay:
    """Mount the compartment's private root (see the module docstring); `.merged` is it.

    Top layer: a fresh copy of `tests_dir` at tests/, opaque (the agent's /tests never shows
    through); below: the agent's root when it has one; upper and work dirs of its own, next
    to `tests_dir` (the agent's sandbox never binds them). Undo with `drop_private_root`.
    """
    base = Path(tempfile.mkdtemp(prefix="root-", dir=tests_dir.parent))
    layer = base / "layer"
    layer.mkdir()
    shutil.copytree(tests_dir, layer / "tests", symlinks=False)
    os.setxattr(layer / "tests", "trusted.overlay.opaque", b"y")
    lowers = [layer] + ([plan.overlays["/"].merged] if "/" in plan.overlays else [])
    ov = Overlay(lowers=lowers, merged=base / "mnt", upper=base / "upper", work=base / "work")
    try:
        ovl.mount(ov)
    except OSError:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return ov


def drop_private_root(ov: Overlay) -> None:
    ovl.umount(ov.merged)
    shutil.rmtree(ov.merged.parent, ignore_errors=True)


@dataclass
class CompartmentRun:
    records: list[dict]
    exit_code: int | None
    output: str
    timed_out: bool
    seconds: float
    bad_lines: int = 0  # channel lines that are not JSON objects (only the harness writes there)


def run_compartment(
    sandbox,
    argv: list[str],
    env: dict[str, str],
    tests_dir: Path,
    vlogs_dir: Path,
    harness_dir: Path,
    timeout: float,
    netns_fd: int | None,
    channel: bool = True,
    limits: Limits | None = None,
    output_cap: int = 1 << 20,
    site_dir: Path | dict[str, Path] | None = None,
    pidns_fd: int | None = None,
) -> CompartmentRun:
    """Run `argv` (inside paths; may contain "{fd}") in the compartment; collect the channel."""
    t0 = time.monotonic()
    as_root = os.geteuid() == 0
    share_net = netns_fd is not None and as_root
    clear_mount_points(sandbox.plan)
    proot = private_root(sandbox.plan, tests_dir) if as_root else None
    try:
        return _run(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir, timeout, netns_fd,
                    channel, limits, output_cap, site_dir, as_root, share_net, proot, t0,
                    pidns_fd if as_root else None)  # fmt: skip
    finally:
        if proot is not None:
            drop_private_root(proot)


def _run(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir, timeout, netns_fd, channel,
         limits, output_cap, site_dir, as_root, share_net, proot, t0,
         pidns_fd=None) -> CompartmentRun:  # fmt: skip
    inner = compartment_args(
        sandbox.plan, sandbox.spec, as_root, tests_dir, vlogs_dir, harness_dir, share_net,
        site_dir, root_dir=proot.merged if proot is not None else None,
        mask_dir=maskmod.mask_layer() if as_root else None, share_pid=pidns_fd is not None,
    )  # fmt: skip
    inner[0] = _which("bwrap")
    r_fd, w_fd = os.pipe()
    pass_fds = [w_fd] if channel else []
    pre: list[str] = []
    if share_net:
        pass_fds.append(netns_fd)
        pre = [_which("nsenter"), f"--net=/proc/self/fd/{netns_fd}"]
    if pre:
        pre.append("--")
    if pidns_fd is not None:  # bwrap joins it and mounts that namespace's own /proc
        pass_fds.append(pidns_fd)
        inner[1:1] = ["--pidns", str(pidns_fd)]
    cg = (
        Cgroup.create(f"{sandbox.name}-v{os.urandom(3).hex()}", limits or sandbox.spec.limits)
        if as_root
        else None
    )
    script = join_script(cg) + 'exec "$@"'
    cmd = [
        "/bin/sh",
        "-c",
        script,
        "t1-verifier",
        *pre,
        *inner,
        "--",
        *[a.replace("{fd}", str(w_fd)) for a in argv],
    ]
    out_path = vlogs_dir.parent / "compartment-output.txt"
    records: list[dict] = []
    timed_out = False
    try:
        with out_path.open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                pass_fds=pass_fds, start_new_session=True,
            )  # fmt: skip
            os.close(w_fd)
            w_fd = -1
            buf = b""
            deadline = t0 + timeout
            while channel:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([r_fd], [], [], min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(r_fd, 1 << 16)
                if not chunk:  # every holder of the write end is gone: the harness ended
                    break
                buf += chunk
                if len(buf) > 64 << 20:
                    break
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if cg is not None:
                cg.kill_all()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait(timeout=30)
    finally:
        if w_fd >= 0:
            os.close(w_fd)
        os.close(r_fd)
        if cg is not None:
            cg.kill_all()
            cg.remove()
    got, bad = json_records(buf.decode("utf-8", "replace").splitlines())
    records += got
    output = output_tail(out_path, output_cap)
    return CompartmentRun(records, proc.returncode, output, timed_out, time.monotonic() - t0, bad)


def json_records(lines) -> tuple[list[dict], int]:
    """The JSON objects among `lines` (a channel's records), and how many lines were not one."""
    records, bad = [], 0
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def output_tail(path: Path, cap: int) -> str:
    """The last `cap` bytes of a run's output file, as text."""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - cap))
        return fh.read().decode("utf-8", "replace")
