"""The apptainer backend's verifier compartment: a second container over the agent's files.

    stopped = stop_instance_agent(sandbox)                    # shell and instance stopped
    run = run_apptainer_verify(sandbox, argv, env, tests_dir, vlogs_dir, harness_dir,
                               timeout, stopped.netns_fd, channel=True, site_dir=site)
    run.records, run.output, run.timed_out                    # a compartment.CompartmentRun

The counterpart of t1.sandbox.compartment for t1.sandbox.apptainer, with the same call shape,
so t1.verify.hardened can run the same harness argv in either. The sandbox's instance runs
over a writable host-directory overlay (`ApptainerSandbox.overlay_dir`). To verify:
1. the agent is stopped: its shell's process group killed and the instance stopped (every
   process in it: an instance has no cgroup of ours to sort services from the rest, so
   services do not survive here; `services_pid` is the hook for a site that keeps them);
2. `apptainer exec --containall --cleanenv` of the same image over that overlay READ-ONLY
   (`--overlay DIR:ro`) with a `--writable-tmpfs` on top (what the tests write is thrown
   away with the container; the agent's overlay is never written), new pid/ipc namespaces
   and a private /tmp and home (--containall), and binds: the agent's workdir and /logs
   where the agent had them, a fresh /logs/verifier, the tests' copy at /tests, the harness
   at /run/t1/harness (its pytest site inside), the host's /usr and /etc at /run/t1/host
   (the harness's Python, started by the host's loader: t1.sandbox.hostview.Pristine), the
   provision cache at /opt/t1 (all read-only but the workdir and the logs), /dev/null over
   /etc/ld.so.preload and the host's nsswitch.conf;
3. the network is the agent's: an offline sandbox's verifier gets an empty network namespace
   of its own (`--net --network none`, as the instance had); a sandbox with a network gets
   no namespace change; with services (`services_pid`) it joins theirs (`nsenter --net`,
   needs root) and asks for no new one;
4. the outcome channel is a pipe whose write end the container inherits (apptainer passes
   open fds through), as in the bwrap compartment.
Differences from bwrap: /tests is read-only (a task that rewrites or moves /tests fails
here), no cgroup of the verifier's own unless the site delegates (limits as the instance's),
no capability set of ours (apptainer's: the user's own, no privileges).
The argument list is pure (`verify_exec_args`, tested everywhere); running needs the binary.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.apptainer import bind_args
from t1.sandbox.base import SandboxSpec
from t1.sandbox.compartment import HARNESS_INSIDE, CompartmentRun, json_records, output_tail
from t1.sandbox.hostview import HOST_VIEW

TESTS_INSIDE = "/tests"
PROVISION_INSIDE = "/opt/t1"


def verify_binds(
    workdir: str,
    host_workdir: Path | None,
    logs_dir: Path | None,
    tests_dir: Path,
    vlogs_dir: Path,
    harness_dir: Path,
    site_dir: Path | None = None,
    prov_root: Path | None = None,
    host_root: Path = Path("/"),
) -> list[tuple[Path, str, bool]]:
    """[(host, inside, read_only)] of the verifier's container (see the module docstring)."""
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
        (Path(harness_dir), HARNESS_INSIDE, True),
    ]
    if site_dir is not None:
        binds.append((Path(site_dir), f"{HARNESS_INSIDE}/site", True))
    if prov_root is not None:
        binds.append((Path(prov_root), PROVISION_INSIDE, True))
    binds.append((Path("/dev/null"), "/etc/ld.so.preload", True))
    if (host_root / "etc/nsswitch.conf").is_file():
        binds.append((host_root / "etc/nsswitch.conf", "/etc/nsswitch.conf", True))
    return binds


def verify_exec_args(
    spec: SandboxSpec,
    image: str,
    overlay: Path,
    binds: list[tuple[Path, str, bool]],
    env: dict[str, str],
    argv: list[str],
    services_pid: int | None = None,
    cgroups: bool = False,
) -> list[str]:
    """`[nsenter --net=... --] apptainer exec --containall ... IMAGE argv` (pure)."""
    a: list[str] = []
    if services_pid is not None:
        a += ["nsenter", f"--net=/proc/{services_pid}/ns/net", "--"]
    a += ["apptainer", "exec", "--containall", "--cleanenv"]
    a += ["--overlay", f"{overlay}:ro", "--writable-tmpfs", "--pwd", spec.workdir]
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
        a += ["--env", f"{k}={v}"]
    a += bind_args(binds)
    return a + [image, *argv]


@dataclass
class InstanceStopped:
    """What stop_agent reports, for the apptainer backend (t1.sandbox.agent_stop's shape)."""

    killed: int = 0
    services: dict[int, str] = field(default_factory=dict)
    netns_fd: int | None = None


def stop_instance_agent(sandbox) -> InstanceStopped:  # noqa: ANN001 - ApptainerSandbox
    """Kill the agent's shell (its process group) and stop the instance: nothing of the agent
    runs when the verifier starts. The overlay dir stays (the sandbox's stop removes it)."""
    from t1.sandbox.apptainer import instance_stop_args

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
        subprocess.run(instance_stop_args(sandbox.name), capture_output=True, timeout=120)
        sandbox._started = False
    return InstanceStopped(killed=killed)


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
    site_dir: Path | None = None,
) -> CompartmentRun:
    """Run `argv` (inside paths; "{fd}" is the channel's fd) in the verifier's container."""
    del netns_fd  # services do not survive an instance stop (module docstring)
    if sandbox.overlay_dir is None or sandbox.image is None:
        raise RuntimeError("the apptainer sandbox has no host-dir overlay to verify over")
    t0 = time.monotonic()
    binds = verify_binds(sandbox.spec.workdir, sandbox.host_workdir, sandbox.logs_dir,
                         tests_dir, vlogs_dir, harness_dir, site_dir, sandbox.prov_root)  # fmt: skip
    r_fd, w_fd = os.pipe()
    inner = [a.replace("{fd}", str(w_fd)) for a in argv]
    cmd = verify_exec_args(sandbox.spec, sandbox.image, sandbox.overlay_dir, binds, env, inner,
                           cgroups=getattr(sandbox, "cgroups", False))  # fmt: skip
    out_path = Path(vlogs_dir).parent / "compartment-output.txt"
    buf, timed_out = b"", False
    try:
        with out_path.open("wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, pass_fds=[w_fd] if channel else [],
                                    start_new_session=True)  # fmt: skip
            os.close(w_fd)
            w_fd = -1
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
    finally:
        if w_fd >= 0:
            os.close(w_fd)
        os.close(r_fd)
    records, bad = json_records(buf.decode("utf-8", "replace").splitlines())
    output = output_tail(out_path, output_cap)
    return CompartmentRun(records, proc.returncode, output, timed_out, time.monotonic() - t0, bad)
