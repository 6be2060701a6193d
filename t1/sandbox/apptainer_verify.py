"""The apptainer backend's verifier compartment: a second container over the agent's files.

    stopped = stop_instance_agent(sandbox)                    # shell and instance stopped
    run = run_apptainer_verify(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir,
                               timeout, stopped.netns_fd, channel=True, site_dir=sites)
    run.records, run.output, run.timed_out                    # a compartment.CompartmentRun
    check_verify_args(cmd, expect)                            # [] or what is missing in cmd

The counterpart of t1.sandbox.compartment for t1.sandbox.apptainer, with the same call shape,
so t1.verify.hardened runs the same runner argv, harness dir and outcome channel in either
(`t1.verify.hardened.compartment_kind` picks one). The sandbox's instance runs over a
writable host-directory overlay (`ApptainerSandbox.overlay_dir`) and a scratch dir
(`--workdir`: its /tmp, /var/tmp and home). To verify:
1. the agent is stopped: its shell's process group killed and the instance stopped with
   --force (every process in it: an instance has no cgroup of ours to sort services from the
   rest, so services do not survive here); `run_apptainer_verify` refuses a sandbox whose
   shell or instance still runs;
2. the mount points are cleared on the host (`clear_mount_points`): the overlay's upper
   layer loses /tests, /run and /.singularity.d (apptainer's env and action scripts run
   before our argv with the channel fd open: the agent's edits of them are dropped, the
   image's own show through), /logs/verifier is a fresh dir;
3. `apptainer exec --containall --cleanenv` of the same image over that overlay READ-ONLY
   (`--overlay DIR:ro`) with a `--writable-tmpfs` on top (what the tests write at / is thrown
   away with the container; the agent's overlay is never written), new pid and ipc
   namespaces, contained /dev and no host home (--containall; /tmp, /var/tmp and home are the
   agent's scratch: `--workdir`), and binds: the agent's workdir and /logs where the agent
   had them, a fresh /logs/verifier, the tests' copy at /tests READ-ONLY, the harness at
   /run/t1/harness (its pytest sites inside), a fresh TMPDIR at /run/t1/tmp, the host's /usr
   and /etc at /run/t1/host (the harness's Python, started by the host's loader:
   t1.sandbox.hostview.Pristine; as root the secrets mask over them), the provision cache
   at /opt/t1 (all read-only but the workdir, the logs and the TMPDIR), /dev/null over
   /etc/ld.so.preload and the host's nsswitch.conf;
4. the network is the agent's: an offline sandbox's verifier gets an empty network namespace
   of its own (`--net --network none`, as the instance had); a sandbox with a network gets
   no namespace change; with services (`services_pid`) it would join theirs (`nsenter
   --net`, needs root) and ask for no new one;
5. the outcome channel is a pipe whose write end the container inherits (apptainer passes
   open fds through), as in the bwrap compartment; the exact command is checked
   (`check_verify_args`) and written to `ARGV_RECORD` beside the verifier's output before
   it runs; a command that fails the check never runs.

Not enforced here, unlike bwrap (the report and t1.verify.verifier say so too): services do
not survive the agent's stop (a test that checks a server the agent left running fails), so
no pid namespace is shared either; /tests is read-only in both, but there is no private
overlay root: the agent's /tests in its overlay is removed instead; no cgroup of the
verifier's own unless the site delegates (`cgroups`), so a process the tests start outlives
the run only until the container's pid namespace ends; no capability set of ours (apptainer's:
the user's own, no privileges, no CAP_SETUID for tests that drop to another user); HOME is
the user's scratch home (apptainer keeps HOME its own). Trusted, as bwrap is there: the
apptainer binary (>= 1.0: its action scripts run in its embedded interpreter, never the
container's /bin/sh) and the image's own /.singularity.d env scripts, which run with the
channel fd open (docker-converted images only export; a command one calls comes from the
agent's /usr). Not run here: whether apptainer passes the fd through and creates the
nested mount points as the docstring says (the skipped tests check it where it exists).
The argument lists are pure (`verify_exec_args`, `check_verify_args`, tested everywhere);
running needs the binary (`run_apptainer_verify` says "apptainer is not installed").
"""

from __future__ import annotations

import csv
import io
import json
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.apptainer import bind_args, have_apptainer, instance_stop_args
from t1.sandbox.base import SandboxError, SandboxSpec
from t1.sandbox.compartment import (
    HARNESS_INSIDE,
    TMP_INSIDE,
    CompartmentRun,
    json_records,
    masked_in_layer,
    output_tail,
)
from t1.sandbox.hostview import HOST_VIEW

TESTS_INSIDE = "/tests"
PROVISION_INSIDE = "/opt/t1"
ARGV_RECORD = "apptainer-verify.json"  # beside compartment-output.txt: the exact command run
_CLEARED = (".singularity.d", "tests", "run")  # removed from the overlay's upper layer
_VALUED = {"--overlay", "--pwd", "--network", "--bind", "-B", "--env", "--memory", "--cpus",
           "--pids-limit", "--workdir", "-W", "--hostname", "--home", "-H", "--env-file",
           "--mount"}  # fmt: skip
_FORBIDDEN = ("--writable", "--keep-privs", "--add-caps", "--allow-setuid", "--home", "-H",
              "--no-mount", "--userns", "--mount", "--fusemount")  # fmt: skip


def verify_binds(
    workdir: str,
    host_workdir: Path | None,
    logs_dir: Path | None,
    tests_dir: Path,
    vlogs_dir: Path,
    harness_dir: Path,
    site_dir: Path | dict[str, Path] | None = None,
    prov_root: Path | None = None,
    host_root: Path = Path("/"),
    tmp_dir: Path | None = None,
    mask_dir: Path | None = None,
) -> list[tuple[Path, str, bool]]:
    """[(host, inside, read_only)] of the verifier's container (see the module docstring).

    site_dir: one dir bound at HARNESS_INSIDE/site, or {name: dir} at HARNESS_INSIDE/name
    (t1.verify.script_plan.prepare_runner's sites); tmp_dir: the harness's TMPDIR."""
    binds: list[tuple[Path, str, bool]] = []
    if host_workdir is not None:
        binds.append((Path(host_workdir), workdir, False))
    if logs_dir is not None:
        binds.append((Path(logs_dir), "/logs", False))
    binds += [
        (Path(vlogs_dir), "/logs/verifier", False),
        (Path(tests_dir), TESTS_INSIDE, True),
        (host_root / "usr", f"{HOST_VIEW}/usr", True),
        (host_root / "etc", f"{HOST_VIEW}/etc", True),
    ]
    if mask_dir is not None:
        for rel in masked_in_layer(mask_dir, host_root, ("usr", "etc")):
            binds.append((mask_dir / rel, f"{HOST_VIEW}/{rel}", True))
    binds.append((Path(harness_dir), HARNESS_INSIDE, True))
    sites = {"site": site_dir} if isinstance(site_dir, Path) else (site_dir or {})
    for name, d in sites.items():
        binds.append((Path(d), f"{HARNESS_INSIDE}/{name}", True))
    if tmp_dir is not None:
        binds.append((Path(tmp_dir), TMP_INSIDE, False))
    if prov_root is not None:
        binds.append((Path(prov_root), PROVISION_INSIDE, True))
    binds.append((Path("/dev/null"), "/etc/ld.so.preload", True))
    if (host_root / "etc/nsswitch.conf").is_file():
        binds.append((host_root / "etc/nsswitch.conf", "/etc/nsswitch.conf", True))
    return binds


def env_arg(key: str, value: str) -> str:
    """One `--env` value as apptainer's flag parser (pflag's key=value map) reads it back:
    one '=' is taken whole, more are CSV (quoted here when the value has ',' or '"')."""
    item = f"{key}={value}"
    if item.count("=") == 1:
        if item.startswith('"') or item.endswith('"'):
            raise SandboxError(f"apptainer --env cannot pass {key}: its value ends in '\"'")
        return item
    if not any(c in item for c in ',"\n\r'):
        return item
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([item])
    return buf.getvalue()


def verify_exec_args(
    spec: SandboxSpec,
    image: str,
    overlay: Path,
    binds: list[tuple[Path, str, bool]],
    env: dict[str, str],
    argv: list[str],
    services_pid: int | None = None,
    cgroups: bool = False,
    scratch: Path | None = None,
    apptainer: str = "apptainer",
) -> list[str]:
    """`[nsenter --net=... --] apptainer exec --containall ... IMAGE argv` (pure)."""
    a: list[str] = []
    if services_pid is not None:
        a += ["nsenter", f"--net=/proc/{services_pid}/ns/net", "--"]
    a += [apptainer, "exec", "--containall", "--cleanenv"]
    a += ["--overlay", f"{overlay}:ro", "--writable-tmpfs", "--pwd", spec.workdir]
    if scratch is not None:
        a += ["--workdir", str(scratch)]
    if services_pid is None and not spec.network:
        a += ["--net", "--network", "none"]
    if cgroups:
        if spec.limits.memory_mb is not None:
            a += ["--memory", f"{spec.limits.memory_mb}M"]
        if spec.limits.max_processes is not None:
            a += ["--pids-limit", str(spec.limits.max_processes)]
        if spec.limits.cpus is not None:
            a += ["--cpus", str(spec.limits.cpus)]
    for k, v in sorted(env.items()):
        a += ["--env", env_arg(k, v)]
    a += bind_args(binds)
    return a + [image, *argv]


@dataclass(frozen=True)
class Expect:
    """What `check_verify_args` requires of a verifier command (host paths and inside argv)."""

    image: str
    overlay: Path
    tests_dir: Path
    harness_dir: Path
    entry: list[str]  # the argv after the image: the runner's, its channel fd in place
    fd: int | None  # the outcome channel's fd, passed to the container (None: no channel)
    offline: bool = True
    writable: tuple[str, ...] = ("/logs", "/logs/verifier", TMP_INSIDE)  # + the workdir
    home: Path = field(default_factory=Path.home)


def _binds_of(args: list[str]) -> dict[str, tuple[str, bool]]:
    """inside -> (host, read_only) of every --bind / -B (last wins, as the mounts stack)."""
    out: dict[str, tuple[str, bool]] = {}
    for i, a in enumerate(args[:-1]):
        if a in ("--bind", "-B"):
            for spec in args[i + 1].split(","):
                host, _, rest = spec.partition(":")
                inside, _, opts = rest.partition(":")
                out[inside or host] = (host, "ro" in opts.split(":"))
    return out


def check_verify_args(args: list[str], expect: Expect) -> list[str]:
    """What the command `args` misses of the verifier's hardening (empty: none): a new contained
    container of `expect.image` (not the agent's instance) over the agent's overlay read-only,
    new pid/ipc namespaces, no host home, the tests read-only at /tests, the harness and the
    host view read-only, no preload, the network closed when offline, writable binds only
    where the agent wrote anyway, and the runner's argv with the channel fd after the image."""
    bad: list[str] = []
    if "instance://" in " ".join(args):
        bad.append("runs in the agent's instance (instance://), not a container of its own")
    if expect.image not in args:
        return bad + [f"the image {expect.image} is not in the command"]
    i_img = args.index(expect.image)
    opts, tail = args[:i_img], args[i_img + 1 :]
    start = next((i for i, a in enumerate(opts) if os.path.basename(a) == "apptainer"), None)
    if start is None or opts[start + 1 : start + 2] != ["exec"]:
        bad.append("not an `apptainer exec`")
    flags = [a for j, a in enumerate(opts) if j == 0 or opts[j - 1] not in _VALUED]
    for flag, why in (
        ("--containall", "new pid and ipc namespaces, contained /dev, /tmp and home"),
        ("--cleanenv", "no host environment"),
        ("--writable-tmpfs", "what the verifier writes at / stays out of the agent's overlay"),
    ):
        if flag not in flags:
            bad.append(f"{flag} is missing ({why})")
    bad += [f"{f} is set" for f in _FORBIDDEN if f in flags]
    overlays = [opts[j + 1] for j, a in enumerate(opts[:-1]) if a == "--overlay"]
    if overlays != [f"{expect.overlay}:ro"]:
        bad.append(f"the overlay is not the agent's read-only ({overlays})")
    if expect.offline and not ("--net" in flags and _value(opts, "--network") == "none"):
        bad.append("the sandbox is offline but the verifier gets a network")
    binds = _binds_of(opts)
    need = {TESTS_INSIDE: str(expect.tests_dir), HARNESS_INSIDE: str(expect.harness_dir),
            f"{HOST_VIEW}/usr": None, f"{HOST_VIEW}/etc": None,
            "/etc/ld.so.preload": "/dev/null"}  # fmt: skip
    for inside, host in need.items():
        got = binds.get(inside)
        if got is None or not got[1] or (host is not None and got[0] != host):
            bad.append(f"{inside} is not bound read-only from {host or 'the host'} ({got})")
    workdir = _value(opts, "--pwd")
    home = Path(expect.home).resolve()
    for inside, (host, ro) in binds.items():
        if not ro and inside not in (*expect.writable, workdir):
            bad.append(f"{inside} is bound writable from {host}")
        if any(Path(inside) in Path(n).parents for n in (TESTS_INSIDE, HARNESS_INSIDE)):
            bad.append(f"{inside} (from {host}) is bound over /tests or the harness")
        hp = Path(host).resolve()
        if hp == home or hp in home.parents:
            bad.append(f"{inside} binds the host's home {home} (from {host})")
    scratch = _value(opts, "--workdir")
    if scratch is not None and (Path(scratch).resolve() in (home, *home.parents)):
        bad.append(f"--workdir {scratch} is (above) the host's home")
    if tail != expect.entry:
        bad.append("the argv after the image is not the verifier's runner")
    fd_ok = "--fd" in tail and tail[tail.index("--fd") + 1 :][:1] == [str(expect.fd)]
    if expect.fd is not None and not fd_ok:
        bad.append(f"the runner is not given the outcome channel fd {expect.fd}")
    return bad


def _value(opts: list[str], flag: str) -> str | None:
    vals = [opts[j + 1] for j, a in enumerate(opts[:-1]) if a == flag]
    return vals[-1] if vals else None


@dataclass
class InstanceStopped:
    """What stop_agent reports, for the apptainer backend (t1.sandbox.agent_stop's shape)."""

    killed: int = 0
    services: dict[int, str] = field(default_factory=dict)
    netns_fd: int | None = None
    pidns_fd: int | None = None  # never: nothing of the agent survives an instance stop


def agent_stopped(sandbox) -> bool:  # noqa: ANN001 - ApptainerSandbox
    """Neither the agent's shell nor its instance runs."""
    return sandbox.shell is None and not getattr(sandbox, "_started", False)


def stop_instance_agent(sandbox) -> InstanceStopped:  # noqa: ANN001 - ApptainerSandbox
    """Kill the agent's shell (its process group) and stop the instance: nothing of the agent
    runs when the verifier starts. The overlay dir stays (the sandbox's stop removes it).
    Raises SandboxError when the instance does not stop."""
    killed = 0
    shell, sandbox.shell = sandbox.shell, None
    if shell is not None:
        shell.close()
        if shell.proc is not None:
            try:
                os.killpg(shell.proc.pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
            shell.proc.wait(timeout=30)
    if getattr(sandbox, "_started", False):
        r = subprocess.run(instance_stop_args(sandbox.name), capture_output=True, text=True,
                           timeout=120)  # fmt: skip
        if r.returncode != 0:
            raise SandboxError(f"apptainer instance stop failed: {r.stderr.strip()[-500:]}")
        sandbox._started = False
    return InstanceStopped(killed=killed)


def overlay_upper(overlay: Path) -> Path:
    """The upper layer of a host-directory overlay (apptainer keeps `upper/` and `work/` in
    it; a bare dir is its own upper)."""
    return overlay / "upper" if (overlay / "upper").is_dir() else overlay


def clear_mount_points(sandbox) -> None:  # noqa: ANN001 - ApptainerSandbox, agent stopped
    """The agent's /tests, /run and /.singularity.d out of its overlay (the image's show
    through), and a fresh empty /logs/verifier (see the module docstring, step 2)."""
    upper = overlay_upper(Path(sandbox.overlay_dir))
    spots = [upper / n for n in _CLEARED]
    if sandbox.logs_dir is not None:
        spots.append(Path(sandbox.logs_dir) / "verifier")
    for p in spots:
        if p.is_symlink() or (p.exists() and not p.is_dir()):  # whiteouts are char devices
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
        if p.exists() or p.is_symlink():
            raise SandboxError(f"cannot clear {p} before the verifier runs")
    if sandbox.logs_dir is not None:
        (Path(sandbox.logs_dir) / "verifier").mkdir()


def scratch_dir(sandbox) -> Path | None:  # noqa: ANN001
    """The instance's --workdir (its /tmp, /var/tmp, home), when it has one."""
    return getattr(sandbox, "scratch_dir", None)


def verify_command(sandbox, argv: list[str], env: dict[str, str], tests_dir: Path,  # noqa: ANN001
                   vlogs_dir: Path, harness_dir: Path, fd: int,
                   site_dir: Path | dict[str, Path] | None = None, tmp_dir: Path | None = None,
                   apptainer: str = "apptainer", channel: bool = True,
                   ) -> tuple[list[str], Expect]:  # fmt: skip
    """The exact command `run_apptainer_verify` runs for `argv` ("{fd}" -> `fd`), and what
    `check_verify_args` must find in it (the runner given `fd` when there is a channel)."""
    if sandbox.overlay_dir is None or sandbox.image is None:
        raise SandboxError("the apptainer sandbox has no host-dir overlay to verify over")
    mask = None
    if os.geteuid() == 0:
        from t1.sandbox.mask import mask_layer

        mask = mask_layer()
    binds = verify_binds(sandbox.spec.workdir, sandbox.host_workdir, sandbox.logs_dir,
                         tests_dir, vlogs_dir, harness_dir, site_dir, sandbox.prov_root,
                         tmp_dir=tmp_dir, mask_dir=mask)  # fmt: skip
    inner = [a.replace("{fd}", str(fd)) for a in argv]
    cmd = verify_exec_args(sandbox.spec, sandbox.image, sandbox.overlay_dir, binds, env, inner,
                           cgroups=getattr(sandbox, "cgroups", False),
                           scratch=scratch_dir(sandbox), apptainer=apptainer)  # fmt: skip
    expect = Expect(sandbox.image, Path(sandbox.overlay_dir), Path(tests_dir),
                    Path(harness_dir), inner, fd if channel else None,
                    offline=not sandbox.spec.network)  # fmt: skip
    return cmd, expect


def run_apptainer_verify(
    sandbox,  # noqa: ANN001 - ApptainerSandbox, its agent stopped
    argv: list[str],
    env: dict[str, str],
    tests_dir: Path,
    vlogs_dir: Path,
    harness_dir: Path,
    timeout: float,
    netns_fd: int | None = None,
    channel: bool = True,
    output_cap: int = 1 << 20,
    site_dir: Path | dict[str, Path] | None = None,
    pidns_fd: int | None = None,
) -> CompartmentRun:
    """Run `argv` (inside paths; "{fd}" is the channel's fd) in the verifier's container
    (t1.sandbox.compartment.run_compartment's call shape). Raises SandboxError before anything
    runs when the agent still runs, the command fails `check_verify_args`, or there is no
    apptainer binary (the command is written to `ARGV_RECORD` first)."""
    if netns_fd is not None or pidns_fd is not None:
        raise SandboxError("apptainer: nothing of the agent survives its stop to join")
    if not agent_stopped(sandbox):
        raise SandboxError("the agent's shell or instance still runs: stop_instance_agent first")
    t0 = time.monotonic()
    clear_mount_points(sandbox)
    tmp_dir = Path(vlogs_dir).parent / "tmp"
    tmp_dir.mkdir(exist_ok=True)
    tmp_dir.chmod(0o1777)
    binary = shutil.which("apptainer") or "apptainer"
    fds = list(os.pipe())  # [read end, write end]; -1 once closed (never closed twice)
    try:
        cmd, expect = verify_command(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir,
                                     fds[1], site_dir, tmp_dir, binary, channel)  # fmt: skip
        problems = check_verify_args(cmd, expect)
        record = {"argv": cmd, "pass_fds": [fds[1]] if channel else [], "problems": problems}
        (Path(vlogs_dir).parent / ARGV_RECORD).write_text(json.dumps(record, indent=1))
        if problems:
            raise SandboxError("verifier command refused: " + "; ".join(problems))
        if not have_apptainer():
            raise SandboxError("apptainer is not installed: the verifier container cannot run")
        return _run(cmd, fds, channel, Path(vlogs_dir), timeout, output_cap, t0)
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def _run(cmd: list[str], fds: list[int], channel: bool, vlogs_dir: Path, timeout: float,
         output_cap: int, t0: float) -> CompartmentRun:  # fmt: skip
    r_fd, w_fd = fds
    out_path = vlogs_dir.parent / "compartment-output.txt"
    buf, timed_out = b"", False
    with out_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, pass_fds=[w_fd] if channel else [],
                                start_new_session=True)  # fmt: skip
        os.close(w_fd)  # the container holds the only write end now: its end is our EOF
        fds[1] = -1
        deadline = t0 + timeout
        while channel and len(buf) <= 64 << 20:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r_fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(r_fd, 1 << 16)
                if not chunk:
                    break
                buf += chunk
        if not timed_out:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait(timeout=30)
    records, bad = json_records(buf.decode("utf-8", "replace").splitlines())
    output = output_tail(out_path, output_cap)
    return CompartmentRun(records, proc.returncode, output, timed_out, time.monotonic() - t0, bad)
