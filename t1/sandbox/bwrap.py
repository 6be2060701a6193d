"""The bubblewrap sandbox (embedded default backend): host system dirs, copy-on-write, no network.

    t1 sandbox run -- uname -a                      # one command in a fresh sandbox
    with open_sandbox(SandboxSpec(workdir="/app")) as sb: sb.exec("apt-get install -y jq")

What the sandbox sees:
* `/usr`, `/etc`, `/var`: one kernel overlay each, lowerdir = [env layer] : [provision layer] :
  secrets mask (t1.sandbox.mask) : host dir, upperdir per sandbox; writes (apt-get install)
  land in the upper dir and vanish at stop; the host is never changed. With `cow=False` the
  overlay has no upper dir and is read-only. /bin, /lib, /lib64, /sbin are the host's symlinks.
* Everything else starts empty: a tmpfs root (with an env layer's rootfs: an overlay of it),
  `/root` and `/home` empty, tmpfs `/tmp`, `/run`, `/dev/shm`; the host's /root, /home, /opt,
  /srv, /mnt, /work, /tmp are not there.
* Writable binds: the workdir (`spec.workdir`, from a fresh host dir), `/logs`, and `/tmp`,
  `/root`, `/home` (fresh host dirs; /root and /home live in the env rootfs when there is one),
  so the verifier's compartment sees them as the agent left them. Workdir and logs are
  the sandbox's own dirs unless `spec.host_workdir` / `spec.logs_dir` name host dirs: its own
  vanish at stop(), so read results (e.g. /logs/verifier/reward.txt) before, or pass dirs.
  The provision cache (t1.sandbox.provision) is read-only at /opt/t1.
* Namespaces: pid, ipc, uts (hostname `sandbox`), net (none: not even the host's loopback)
  unless `spec.network`; user too when not run as root. `--cap-drop ALL`: bwrap run by real
  root would otherwise keep every capability (CAP_SYS_ADMIN, CAP_MKNOD, CAP_DAC_OVERRIDE ...)
  inside; no_new_privs is set. An env build (a Dockerfile's RUN) keeps CAP_CHOWN, CAP_FOWNER
  and CAP_DAC_OVERRIDE, as `docker build` does (`adduser`); the agent never has them. As root
  the shell runs with the `shadow` group as a supplementary one, so shadow-utils can rewrite
  the mask's synthesized root:shadow /etc/shadow. `--die-with-parent` (PR_SET_PDEATHSIG) fires when the THREAD
  that started the sandbox exits: start and use a sandbox from a thread that outlives it.
* Limits: a per-sandbox cgroup (t1.sandbox.limits) joined before bwrap runs, RLIMIT_FSIZE,
  wall time (`limits.wall_s`); stop() kills every process in the cgroup and checks.

The overlays are mounted by this process (t1.sandbox.overlay, mount(2)) before bwrap starts
and unmounted at stop(); sandbox dirs live under `runtime_root()` (/dev/shm when it is a
tmpfs) and each names its owner pid, so the next start cleans up after a killed process.

Launch chain (bwrap's parent is this process; each step execs the next):
    sh -c 'reopen the pty as controlling tty; join cgroup; ulimit -f' -> bwrap ... ->
    bash job-control loop -> bash --rcfile /run/t1/rc -i   (t1.sandbox.shell's protocol)
With `spec.tty_order` (run.deterministic), t1.sandbox.tty_order starts bwrap under its seccomp
filter and stays as bwrap's parent, ordering the terminal writes of processes that run at once.
Non-root: no overlays and no cgroup (read-only binds, --unshare-user, prlimit --nproc).

The layout and the bwrap argv (pure): t1.sandbox.bwrap_plan; where sandbox dirs live, the host
tools that start them and their removal: t1.sandbox.runtime.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import time
from pathlib import Path

from t1.sandbox import mask as maskmod
from t1.sandbox import overlay as ovl
from t1.sandbox.base import ExecResult, SandboxError, SandboxSpec
from t1.sandbox.bwrap_plan import (
    CTL_INSIDE,
    STAGE_INSIDE,
    Plan,
    bwrap_args,
    plan_overlays,
    sandbox_env,
)
from t1.sandbox.layer import load_layer, seed_workdir
from t1.sandbox.limits import Cgroup, join_script, rlimit_prefix, ulimit_script
from t1.sandbox.runtime import _which, copy_path, remove_tree_later, runtime_root
from t1.sandbox.shell import PtyShell, outer_loop
from t1.sandbox.tty_order import tty_order_prefix

log = logging.getLogger(__name__)


class BwrapSandbox:
    """A bubblewrap sandbox with one persistent shell. See the module docstring."""

    def __init__(self, spec: SandboxSpec, build_into: Path | None = None) -> None:
        self.spec = spec
        self.build_into = build_into
        self.name = "t1-" + os.urandom(6).hex()
        self.plan: Plan | None = None
        self.cgroup: Cgroup | None = None
        self.shell: PtyShell | None = None
        self.started_at = 0.0
        self.notes: list[str] = []
        self._own_workdir = False

    @property
    def base_env(self) -> dict[str, str] | None:
        """The environment the sandbox shell started with (the verifier runs under it)."""
        return dict(self.plan.env) if self.plan is not None and self.plan.env else None

    # -- paths the caller may read after the run --------------------------------------------

    @property
    def host_workdir(self) -> Path:
        assert self.plan is not None and self.plan.workdir_host is not None
        return self.plan.workdir_host

    @property
    def logs_dir(self) -> Path:
        assert self.plan is not None and self.plan.logs_host is not None
        return self.plan.logs_host

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        from t1.sandbox import provision

        spec = self.spec
        as_root = os.geteuid() == 0
        runtime = runtime_root()
        for stale in ovl.gc_stale(runtime):
            cg = Cgroup.find(stale.name)
            cg.kill_all()
            cg.remove()
        root = runtime / self.name
        root.mkdir(parents=True)
        (root / "owner").write_text(str(os.getpid()))
        plan = self.plan = Plan(root=root)
        plan.ctl.mkdir()
        plan.stage.mkdir()
        (root / "empty").mkdir()
        try:
            layer_env: dict[str, str] = {}
            if spec.env_layer is not None:
                layer = load_layer(Path(spec.env_layer))
                layer_env = layer.env
            prov = provision.locate(spec.provision)
            prov_env: dict[str, str] = {}
            prov_layer = None
            if prov is not None:
                plan.provision = prov.root
                prov_env = prov.env(network=spec.network)
                prov_layer = None if spec.network else prov.layer
            else:
                self.notes.append(provision.missing_note(spec.provision))
                log.info(self.notes[-1])
            mask = maskmod.mask_layer() if as_root else None
            if not as_root:
                self.notes.append("not root: no copy-on-write overlays, plain read-only binds")
            else:
                plan.overlays = plan_overlays(
                    root, mask, spec.env_layer, prov_layer, spec.cow, self.build_into
                )
            for ov in plan.overlays.values():
                ovl.mount(ov)
            if self.build_into is None:
                if spec.host_workdir is not None:
                    plan.workdir_host = Path(spec.host_workdir)
                    plan.workdir_host.mkdir(parents=True, exist_ok=True)
                else:
                    plan.workdir_host = root / "workdir"
                    plan.workdir_host.mkdir()
                    self._own_workdir = True
                if spec.env_layer is not None:
                    seed_workdir(Path(spec.env_layer), spec.workdir, plan.workdir_host)
            plan.logs_host = Path(spec.logs_dir) if spec.logs_dir is not None else root / "logs"
            plan.logs_host.mkdir(parents=True, exist_ok=True)
            if self.build_into is None:
                own = ("/tmp",) if "/" in plan.overlays else ("/tmp", "/root", "/home")
                for inside in own:
                    d = root / "shared" / inside.strip("/")
                    d.mkdir(parents=True)
                    d.chmod(0o1777 if inside == "/tmp" else 0o755)
                    plan.shared[inside] = d
            plan.env = sandbox_env(spec, layer_env, prov_env)
            image_py = plan.env.get("T1_IMAGE_PYTHON")
            if (
                image_py
                and prov is not None
                and provision.image_python_dir(prov.root, image_py) is None
            ):
                self.notes.append(
                    f"FROM python:{image_py}: `python` and `pip` are the host's python3 (no "
                    f"Python {image_py} in the provision cache)"
                )
            if self.build_into is not None and spec.workdir:
                plan.env["T1_WORKDIR"] = spec.workdir
            self.cgroup = Cgroup.create(self.name, spec.limits) if as_root else None
            nonce = PtyShell.new_nonce()
            argv = self.launch_argv(as_root, nonce)
            (root / "argv.json").write_text(json.dumps(argv))
            self.shell = PtyShell(
                argv,
                plan.ctl,
                CTL_INSIDE,
                nonce,
                cap=spec.output_cap_bytes,
                env=plan.env,
                new_session=True,
            )
            self.started_at = time.monotonic()
            self.shell.start()
        except BaseException:
            self.stop()
            raise

    def launch_argv(self, as_root: bool, nonce: str) -> list[str]:
        """sh (reopens the pty as its controlling tty, joins the cgroup, sets rlimits) -> bwrap.

        The caller starts it in a new session (PtyShell with new_session=True).
        """
        assert self.plan is not None
        spec, plan = self.spec, self.plan
        inner = bwrap_args(spec, plan, as_root, self.build_into) + outer_loop(nonce, CTL_INSIDE)
        inner[0] = _which(inner[0])
        if spec.tty_order:
            inner = tty_order_prefix() + inner
        script = 'exec 0<>"$T1_TTY" >&0 2>&0 || exit 124; unset T1_TTY; '
        script += join_script(self.cgroup) + ulimit_script(spec.limits, self.cgroup) + 'exec "$@"'
        rl = rlimit_prefix(spec.limits, self.cgroup, as_root, nproc_only=True)
        if rl:
            rl[0] = _which(rl[0])
        # the shadow group as a supplementary group: shadow-utils chown the /etc/shadow files
        # they rewrite to root:shadow (t1.sandbox.mask synthesizes them so, locked)
        gid = maskmod.shadow_gid() if as_root else None
        groups = [_which("setpriv"), f"--groups={gid}", "--"] if gid is not None else []
        return ["/bin/sh", "-c", script, "t1-sandbox", *rl, *groups, *inner]

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        if self.shell is None:
            raise SandboxError("sandbox is not started")
        wall = self.spec.limits.wall_s
        if wall is not None:
            left = wall - (time.monotonic() - self.started_at)
            if left <= 0:
                self.stop()
                raise SandboxError(f"sandbox wall time of {wall:g} s is used up; it was stopped")
            timeout = left if timeout is None else min(timeout, left)
        return self.shell.exec(cmd, timeout)

    # -- files -------------------------------------------------------------------------------

    def _direct(self, inside: str) -> Path | None:
        """Host path of `inside` when it lies in a bound dir (workdir, /logs), else None.

        A path whose host resolution leaves that dir (a symlink made inside) is not direct:
        it is then copied by the shell inside, where the symlink means what the sandbox sees.
        """
        assert self.plan is not None
        p = Path(os.path.normpath(inside))
        binds = (
            (Path(self.spec.workdir), self.plan.workdir_host),
            (Path("/logs"), self.plan.logs_host),
        )
        for mount, base in binds:
            if base is not None and (p == mount or mount in p.parents):
                host = base / p.relative_to(mount)
                real, top = host.resolve(), base.resolve()
                return host if real == top or top in real.parents else None
        return None

    def put(self, src: Path, dst: str) -> None:
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(f"put: {src} does not exist")
        direct = self._direct(dst)
        if direct is not None:
            copy_path(src, direct)
            return
        assert self.plan is not None
        tmp = self.plan.stage / ("put-" + os.urandom(4).hex())
        copy_path(src, tmp)
        q = shlex.quote
        staged = f"{STAGE_INSIDE}/{tmp.name}"
        if src.is_dir():  # dst becomes a copy of the directory (merged into one that exists)
            copy = f"command mkdir -p {q(dst)} && command cp -a {staged}/. {q(dst)}/"
        else:  # a file lands at dst, or inside dst under its own name if dst is a directory
            copy = (
                f"command mkdir -p {q(str(Path(dst).parent))} && if [ -d {q(dst)} ]; then "
                f"command cp -a {staged} {q(dst)}/{q(src.name)}; else command cp -a {staged} {q(dst)}; fi"
            )
        r = self.exec(
            f"{copy}; __t1_rc=$?; command rm -rf {staged}; (exit $__t1_rc)",
            timeout=300,
        )
        if r.exit_code != 0:
            raise SandboxError(f"put {src} -> {dst} failed ({r.exit_code}): {r.output.strip()}")

    def get(self, src: str, dst: Path) -> None:
        dst = Path(dst)
        direct = self._direct(src)
        if direct is not None and direct.exists() and not direct.is_symlink():
            copy_path(direct, dst)
            return
        assert self.plan is not None
        name = "get-" + os.urandom(4).hex()
        q = shlex.quote
        r = self.exec(f"command cp -a {q(src)} {STAGE_INSIDE}/{name}", timeout=300)
        if r.exit_code != 0:
            raise SandboxError(f"get {src} failed ({r.exit_code}): {r.output.strip()}")
        copy_path(self.plan.stage / name, dst)
        shutil.rmtree(self.plan.stage / name, ignore_errors=True)
        (self.plan.stage / name).unlink(missing_ok=True)

    # -- teardown ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every process of the sandbox, unmount, remove its host dirs; idempotent."""
        shell, self.shell = self.shell, None
        if shell is not None:
            shell.close()
        if self.cgroup is not None:
            if not self.cgroup.kill_all():
                log.warning(
                    "sandbox %s: processes survive the kill: %s", self.name, self.cgroup.pids()
                )
        if shell is not None and shell.proc is not None:
            try:
                shell.proc.kill()
            except OSError:
                pass
            try:
                shell.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - keep tearing down
                log.warning("sandbox %s: launcher did not exit", self.name)
        if self.cgroup is not None:
            left = self.cgroup.pids()
            if left:
                raise SandboxError(
                    f"sandbox {self.name}: processes {sorted(left)} survived teardown"
                )
            self.cgroup.remove()
            self.cgroup = None
        if self.plan is not None:
            for ov in self.plan.overlays.values():
                ovl.umount(ov.merged)
            remove_tree_later(self.plan.root)
            self.plan = None

    def __enter__(self) -> BwrapSandbox:
        if self.shell is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
