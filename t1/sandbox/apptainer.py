"""The Apptainer sandbox (HPC backend, no Docker privileges needed): one instance per sandbox.

    with open_sandbox(SandboxSpec(image="docker://python:3.11-slim"), backend="apptainer") as sb:
        sb.exec("python -V")
    t1 sandbox run --backend apptainer -- uname -a

start():  apptainer instance start --containall --cleanenv --net --network none
          --overlay ROOT/overlay --workdir ROOT/scratch --hostname sandbox
          --bind HOST:INSIDE[:ro] ... IMAGE NAME
          (a host-directory overlay and a host scratch dir for /tmp, /var/tmp and home, so
          the verifier runs in a container of its own over the same files:
          t1.sandbox.apptainer_verify, dispatched by t1.verify.hardened;
          T1_APPTAINER_OVERLAY=0 falls back to --writable-tmpfs and a contained /tmp and
          home, and the verifier to the agent's shell, NOT hardened)
shell:    setsid -c prlimit --fsize=N -- apptainer exec --cleanenv --pwd WORKDIR
          --env K=V ... instance://NAME /bin/sh -c LOOP   (t1.sandbox.shell's protocol)
stop():   apptainer instance stop --force NAME, then the shell's process group is killed.

Binds: the task workdir (writable, a fresh host dir), /logs (writable), the shell's control
dir (read-only) with a writable staging dir inside for put/get, and the provision cache
(t1.sandbox.provision) read-only at /opt/t1. `--network none` needs a network namespace,
which Apptainer grants unprivileged users when the site allows it (`allow net networks`).

Images (cached by content hash under `cache_dir`, default ~/.cache/t1/apptainer):
* `docker_image`          -> `apptainer pull <cache>/docker-<hash>.sif docker://IMAGE`
* a Dockerfile + context  -> spython's DockerParser/SingularityWriter definition file, with
                             %files sources made absolute, then `apptainer build --fakeroot`.
`spec.env_layer` is a bwrap notion and is ignored here: the image is the environment.
The argument lists are built by pure functions (tested everywhere); running needs the
`apptainer` binary (tests skip with that reason where it is missing).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from t1.sandbox.base import ExecResult, SandboxError, SandboxSpec
from t1.sandbox.runtime import copy_path
from t1.sandbox.shell import PtyShell, outer_loop
from t1.sandbox.tty_order import tty_order_prefix

log = logging.getLogger(__name__)

CTL_INSIDE = "/run/t1"
STAGE_INSIDE = "/run/t1/stage"
PROVISION_INSIDE = "/opt/t1"


def default_cache() -> Path:
    return Path(os.environ.get("T1_APPTAINER_CACHE", "~/.cache/t1/apptainer")).expanduser()


def have_apptainer() -> bool:
    return shutil.which("apptainer") is not None


# -- argument lists (pure) --------------------------------------------------------------------


def bind_args(binds: list[tuple[Path, str, bool]]) -> list[str]:
    """[(host, inside, read_only)] -> ["--bind", "host:inside[:ro]", ...]."""
    out: list[str] = []
    for host, inside, ro in binds:
        for p in (str(host), inside):
            if ":" in p or "," in p:
                raise SandboxError(f"apptainer bind paths may not contain ':' or ',': {p}")
        out += ["--bind", f"{host}:{inside}" + (":ro" if ro else "")]
    return out


def instance_start_args(
    spec: SandboxSpec,
    name: str,
    image: str,
    binds: list[tuple[Path, str, bool]],
    cgroups: bool = False,
    overlay: Path | None = None,
    scratch: Path | None = None,
) -> list[str]:
    """`apptainer instance start ...` for one sandbox (`overlay`: a writable host dir;
    `scratch`: the host dir behind its /tmp, /var/tmp and home, `--workdir`)."""
    a = ["apptainer", "instance", "start", "--containall", "--cleanenv"]
    if not spec.network:
        a += ["--net", "--network", "none"]
    a += ["--overlay", str(overlay)] if overlay is not None else ["--writable-tmpfs"]
    if scratch is not None:
        a += ["--workdir", str(scratch)]
    a += ["--hostname", spec.hostname]
    if cgroups:  # needs root or a cgroup v2 delegation to the user
        if spec.limits.memory_mb is not None:
            a += ["--memory", f"{spec.limits.memory_mb}M"]
        if spec.limits.max_processes is not None:
            a += ["--pids-limit", str(spec.limits.max_processes)]
        if spec.limits.cpus is not None:
            a += ["--cpus", str(spec.limits.cpus)]
    a += bind_args(binds)
    a += [image, name]
    return a


def exec_args(name: str, workdir: str, env: dict[str, str], argv: list[str]) -> list[str]:
    """`apptainer exec ... instance://NAME argv` with a clean environment."""
    a = ["apptainer", "exec", "--cleanenv", "--pwd", workdir]
    for k, v in sorted(env.items()):
        a += ["--env", f"{k}={v}"]
    return a + [f"instance://{name}", *argv]


def instance_stop_args(name: str) -> list[str]:
    return ["apptainer", "instance", "stop", "--force", name]


def pull_args(image: str, sif: Path) -> list[str]:
    ref = image if "://" in image else f"docker://{image}"
    return ["apptainer", "pull", "--force", str(sif), ref]


def build_args(sif: Path, definition: Path) -> list[str]:
    return ["apptainer", "build", "--fakeroot", "--force", str(sif), str(definition)]


# -- Dockerfile -> definition file ------------------------------------------------------------


def dockerfile_to_definition(dockerfile: Path, context: Path | None = None) -> str:
    """Convert with spython; %files sources become absolute paths under `context`."""
    from spython.main.parse.parsers import DockerParser
    from spython.main.parse.writers import SingularityWriter

    dockerfile = Path(dockerfile).resolve()
    context = Path(context).resolve() if context is not None else dockerfile.parent
    cwd = os.getcwd()
    try:
        os.chdir(context)  # spython checks %files sources relative to the cwd
        recipe = DockerParser(str(dockerfile)).recipe
    finally:
        os.chdir(cwd)
    text = SingularityWriter(recipe).convert()
    out, in_files = [], False
    for line in text.splitlines():
        if line.startswith("%"):
            in_files = line.strip() == "%files"
        elif in_files and line.strip() and not line.startswith("/"):
            src, _, dst = line.strip().partition(" ")
            line = f"{context / src} {dst}".rstrip()
        out.append(line)
    return "\n".join(out) + "\n"


def image_key(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:24]


def context_bytes(context: Path) -> list[bytes]:
    out = []
    for p in sorted(Path(context).rglob("*")):
        if p.is_file() and not p.is_symlink():
            out.append(p.relative_to(context).as_posix().encode() + b"\0" + p.read_bytes())
    return out


def ensure_image(
    docker_image: str | None = None,
    dockerfile: Path | None = None,
    context: Path | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """A .sif for a task's environment (pulled or built once, then cached by content hash)."""
    cache_dir = Path(cache_dir or default_cache()).expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    if docker_image:
        sif = cache_dir / f"docker-{image_key([docker_image.encode()])}.sif"
        cmd = pull_args(docker_image, sif)
        definition = None
    elif dockerfile is not None:
        context = Path(context or Path(dockerfile).parent)
        definition = dockerfile_to_definition(Path(dockerfile), context)
        sif = cache_dir / f"build-{image_key([definition.encode(), *context_bytes(context)])}.sif"
        cmd = None
    else:
        raise SandboxError("ensure_image needs a docker_image or a Dockerfile")
    if sif.exists():
        return sif
    if not have_apptainer():
        raise SandboxError("apptainer is not installed: cannot pull or build task images")
    tmp = sif.with_suffix(".sif.tmp")
    if definition is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".def", dir=cache_dir, delete=False) as f:
            f.write(definition)
        cmd = build_args(tmp, Path(f.name))
    assert cmd is not None
    cmd = [str(tmp) if c == str(sif) else c for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=context)
    if r.returncode != 0:
        raise SandboxError(
            f"{' '.join(cmd[:3])} failed for {docker_image or dockerfile}:\n{r.stderr[-3000:]}"
        )
    tmp.rename(sif)
    return sif


# -- the sandbox ------------------------------------------------------------------------------


class ApptainerSandbox:
    """An Apptainer instance with one persistent shell (same protocol as bwrap)."""

    def __init__(self, spec: SandboxSpec, cgroups: bool = False) -> None:
        self.spec = spec
        self.cgroups = cgroups
        self.name = "t1-" + os.urandom(6).hex()
        self.root: Path | None = None
        self.shell: PtyShell | None = None
        self.host_workdir: Path | None = None
        self.logs_dir: Path | None = None
        self.notes: list[str] = []
        self.base_env: dict[str, str] | None = None  # the instance shell's starting environment
        self.image: str | None = None  # the .sif the instance runs (the verifier's too)
        self.overlay_dir: Path | None = None  # its writable host-dir overlay (None: a tmpfs)
        self.scratch_dir: Path | None = None  # its /tmp, /var/tmp and home (--workdir)
        self.prov_root: Path | None = None  # the provision cache bound at /opt/t1
        self._started = False

    def _binds(self, prov_root: Path | None) -> list[tuple[Path, str, bool]]:
        assert self.root is not None and self.host_workdir is not None and self.logs_dir is not None
        binds = [
            (self.host_workdir, self.spec.workdir, False),
            (self.logs_dir, "/logs", False),
            (self.root / "ctl", CTL_INSIDE, True),
            (self.root / "ctl" / "stage", STAGE_INSIDE, False),
        ]
        if prov_root is not None:
            binds.append((prov_root, PROVISION_INSIDE, True))
        return binds

    def start(self) -> None:
        from t1.sandbox import provision
        from t1.sandbox.bwrap_plan import sandbox_env
        from t1.sandbox.runtime import runtime_root

        if not have_apptainer():
            raise SandboxError(
                "apptainer is not installed (backend 'apptainer'); use backend 'bwrap'"
            )
        spec = self.spec
        self.root = runtime_root() / self.name
        (self.root / "ctl" / "stage").mkdir(parents=True)
        self.host_workdir = Path(spec.host_workdir) if spec.host_workdir else self.root / "workdir"
        self.host_workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = Path(spec.logs_dir) if spec.logs_dir else self.root / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        prov = provision.locate(spec.provision)
        if prov is None:
            self.notes.append(provision.missing_note(spec.provision))
            log.info(self.notes[-1])
        env = self.base_env = sandbox_env(spec, {}, prov.env(network=spec.network) if prov else {})
        image = spec.image or "docker://debian:bookworm-slim"
        if image.startswith("docker://"):
            image = str(ensure_image(docker_image=image))
        self.image = image
        self.prov_root = prov.root if prov else None
        if os.environ.get("T1_APPTAINER_OVERLAY", "1") != "0":
            self.overlay_dir = self.root / "overlay"
            self.overlay_dir.mkdir()
            self.scratch_dir = self.root / "scratch"
            self.scratch_dir.mkdir()
        try:
            r = subprocess.run(
                instance_start_args(
                    spec,
                    self.name,
                    image,
                    self._binds(self.prov_root),
                    self.cgroups,
                    self.overlay_dir,
                    self.scratch_dir,
                ),  # fmt: skip
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                raise SandboxError(f"apptainer instance start failed: {r.stderr[-3000:]}")
            self._started = True
            nonce = PtyShell.new_nonce()
            argv = exec_args(self.name, spec.workdir, env, outer_loop(nonce, CTL_INSIDE))
            rl = []
            if spec.limits.max_file_mb is not None:
                rl = ["prlimit", f"--fsize={spec.limits.max_file_mb * 1024 * 1024}", "--"]
            if spec.tty_order:  # needs apptainer's unprivileged (user namespace) mode
                rl = [*rl, *tty_order_prefix()]
            self.shell = PtyShell(
                ["setsid", "-c", *rl, *argv],
                self.root / "ctl",
                CTL_INSIDE,
                nonce,
                spec.output_cap_bytes,
            )
            self.shell.start(timeout=120)
        except BaseException:
            self.stop()
            raise

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        if self.shell is None:
            raise SandboxError("sandbox is not started")
        return self.shell.exec(cmd, timeout)

    def put(self, src: Path, dst: str) -> None:
        assert self.root is not None
        tmp = self.root / "ctl" / "stage" / ("put-" + os.urandom(4).hex())
        copy_path(Path(src), tmp)
        q = shlex.quote
        r = self.exec(
            f"command mkdir -p {q(str(Path(dst).parent))} && command cp -a {STAGE_INSIDE}/{tmp.name} {q(dst)}; "
            f"__t1_rc=$?; command rm -rf {STAGE_INSIDE}/{tmp.name}; (exit $__t1_rc)",
            timeout=300,
        )
        if r.exit_code != 0:
            raise SandboxError(f"put {src} -> {dst} failed ({r.exit_code}): {r.output.strip()}")

    def get(self, src: str, dst: Path) -> None:
        assert self.root is not None
        name = "get-" + os.urandom(4).hex()
        r = self.exec(f"command cp -a {shlex.quote(src)} {STAGE_INSIDE}/{name}", timeout=300)
        if r.exit_code != 0:
            raise SandboxError(f"get {src} failed ({r.exit_code}): {r.output.strip()}")
        copy_path(self.root / "ctl" / "stage" / name, Path(dst))

    def stop(self) -> None:
        shell, self.shell = self.shell, None
        if shell is not None:
            shell.close()
        if self._started:
            subprocess.run(instance_stop_args(self.name), capture_output=True)
            self._started = False
        if shell is not None and shell.proc is not None:
            try:
                os.killpg(shell.proc.pid, 9)
            except OSError:
                pass
            shell.proc.wait(timeout=30)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> ApptainerSandbox:
        if self.shell is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
