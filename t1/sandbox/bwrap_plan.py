"""The layout of one bwrap sandbox on the host and the bwrap command line that binds it (pure).

    plan = Plan(root=runtime_root() / name, workdir_host=..., logs_host=...)
    plan.overlays = plan_overlays(plan.root, mask, env_layer, provision_layer, cow=True)
    argv = bwrap_args(spec, plan, as_root=True)          # + the shell's outer loop
    env = sandbox_env(spec, layer_env, provision_env)    # what the sandbox shell starts with

What the sandbox sees and why is described in t1.sandbox.bwrap (which starts it); the
verifier's compartment (t1.sandbox.compartment) binds the same plan a second time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox import mask as maskmod
from t1.sandbox.base import SandboxError, SandboxSpec
from t1.sandbox.overlay import Overlay

CTL_INSIDE = "/run/t1"
STAGE_INSIDE = "/run/t1/stage"
PROVISION_INSIDE = "/opt/t1"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def host_symlinks(host_root: Path = Path("/")) -> dict[str, str]:
    """Top-level symlinks of the host that the sandbox recreates (merged-/usr: bin -> usr/bin)."""
    out = {}
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = host_root / name
        if p.is_symlink():
            out[name] = os.readlink(p)
    return out


@dataclass
class Plan:
    """Host-side layout of one sandbox: what to mount and what bwrap binds where."""

    root: Path
    overlays: dict[str, Overlay] = field(default_factory=dict)  # "usr" | "etc" | "var" | "/"
    workdir_host: Path | None = None
    logs_host: Path | None = None
    provision: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    shared: dict[str, Path] = field(default_factory=dict)  # /tmp, /root, /home -> host dirs

    @property
    def ctl(self) -> Path:
        return self.root / "ctl"

    @property
    def stage(self) -> Path:
        return self.root / "ctl" / "stage"


def plan_overlays(
    root: Path,
    mask: Path | None,
    env_layer: Path | None,
    provision_layer: Path | None,
    cow: bool,
    build_into: Path | None = None,
    host_root: Path = Path("/"),
) -> dict[str, Overlay]:
    """The overlays of a sandbox (pure: computes paths, mounts nothing).

    build_into: an env layer being built; its dirs are the upper dirs (writes are kept).
    """
    out: dict[str, Overlay] = {}
    for d in maskmod.SYSTEM_DIRS:
        lowers = []
        if env_layer is not None and (env_layer / d).is_dir():
            lowers.append(env_layer / d)
        if provision_layer is not None and (provision_layer / d).is_dir():
            lowers.append(provision_layer / d)
        if mask is not None:
            lowers.append(mask / d)
        lowers.append(host_root / d)
        ov = Overlay(lowers=lowers, merged=root / "mnt" / d)
        if build_into is not None:
            ov.upper, ov.work = build_into / d, build_into / ".work" / d  # same filesystem
        elif cow or len(lowers) == 1:
            ov.upper, ov.work = root / "upper" / d, root / "work" / d
        if ov.upper is None and len(lowers) == 1:
            raise SandboxError("a read-only overlay needs two lower layers")
        out[d] = ov
    rootfs = env_layer / "rootfs" if env_layer is not None else None
    if build_into is None and rootfs is not None and rootfs.is_dir() and any(rootfs.iterdir()):
        out["/"] = Overlay(
            lowers=[rootfs, root / "empty"],
            merged=root / "mnt" / "rootfs",
            upper=root / "upper" / "rootfs",
            work=root / "work" / "rootfs",
        )
    return out


def system_dir_binds(plan: Plan, host_root: Path = Path("/")) -> list[str]:
    """bwrap binds of /usr, /etc, /var: each one's overlay (read-only when it has no upper
    dir), else the host's dir read-only. The sandbox and the verifier's compartment bind alike."""
    a: list[str] = []
    for d in maskmod.SYSTEM_DIRS:
        ov = plan.overlays.get(d)
        if ov is None:
            a += ["--ro-bind", str(host_root / d), f"/{d}"]
        else:
            a += ["--bind" if ov.upper is not None else "--ro-bind", str(ov.merged), f"/{d}"]
    return a


def bwrap_args(
    spec: SandboxSpec,
    plan: Plan,
    as_root: bool,
    build_into: Path | None = None,
    host_root: Path = Path("/"),
) -> list[str]:
    """The bwrap argument list (pure). Later binds override earlier ones."""
    # bwrap run by real root KEEPS all capabilities unless told otherwise: drop them all
    a = ["bwrap", "--die-with-parent", "--cap-drop", "ALL"]
    if build_into is not None and as_root:
        # an env build (a Dockerfile's RUN, as `docker build` runs it) may chown and chmod
        # what it made, and write into it: `adduser` chowns the home it creates, chmods it
        # and copies /etc/skel into it; the agent's sandbox never gets these (the mask hides
        # host secrets from a build too; ro binds stay read-only)
        for cap in ("CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE"):
            a += ["--cap-add", cap]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if not spec.network:
        a.append("--unshare-net")
    if not as_root:
        a += ["--unshare-user", "--uid", "0", "--gid", "0"]
    a += ["--hostname", spec.hostname]
    if build_into is not None:
        a += ["--bind", str(build_into / "rootfs"), "/"]
    elif "/" in plan.overlays:
        a += ["--bind", str(plan.overlays["/"].merged), "/"]
    a += system_dir_binds(plan, host_root)
    for name, target in host_symlinks(host_root).items():
        a += ["--symlink", target, f"/{name}"]
    a += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc"]
    # /tmp (and /root, /home unless an env rootfs holds them) are host dirs, so that the
    # verifier's compartment (t1.sandbox.compartment) sees what the agent left there
    for inside, empty in (("/tmp", "--tmpfs"), ("/root", "--dir"), ("/home", "--dir")):
        host = plan.shared.get(inside)
        a += ["--bind", str(host), inside] if host is not None else [empty, inside]
    a += ["--tmpfs", "/run", "--chmod", "0700", "/root"]
    if plan.provision is not None:
        a += ["--ro-bind", str(plan.provision), PROVISION_INSIDE]
    if plan.workdir_host is not None:
        a += ["--bind", str(plan.workdir_host), spec.workdir]
    elif spec.workdir != "/":
        a += ["--dir", spec.workdir]
    if plan.logs_host is not None:
        a += ["--bind", str(plan.logs_host), "/logs"]
    a += ["--ro-bind", str(plan.ctl), CTL_INSIDE, "--bind", str(plan.stage), STAGE_INSIDE]
    a += ["--chdir", spec.workdir]
    return a


def sandbox_env(
    spec: SandboxSpec, layer_env: dict[str, str], provision_env: dict[str, str]
) -> dict[str, str]:
    """The environment the sandbox shell starts with (nothing of the host's leaks in)."""
    env = {
        "PATH": BASE_PATH,
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "HOSTNAME": spec.hostname,
        "DEBIAN_FRONTEND": "noninteractive",
        "T1_WORKDIR": spec.workdir,
    }
    prefix = provision_env.get("PATH")
    env.update({k: v for k, v in provision_env.items() if k != "PATH"})
    env.update(layer_env)
    env.update(spec.env)
    if prefix and prefix not in env["PATH"].split(":"):
        env["PATH"] = prefix + ":" + env["PATH"]
    if prefix and env.get("T1_IMAGE_PYTHON"):  # FROM python:X.Y: its `python`, `pip` (README)
        from t1.sandbox.provision_shims import IMAGE_PYTHON_BIN

        parts = [d for d in env["PATH"].split(":") if d != IMAGE_PYTHON_BIN]
        at = parts.index(prefix) + 1 if prefix in parts else 0
        env["PATH"] = ":".join(parts[:at] + [IMAGE_PYTHON_BIN] + parts[at:])
    return env
