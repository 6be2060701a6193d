"""The `Sandbox` seam: what every backend (bwrap, apptainer) provides.

A sandbox holds one persistent shell. State (cwd, environment, background processes) survives
between `exec` calls and on into the verifier, which runs in the same sandbox after the agent.

    with open_sandbox(spec) as sb:          # t1.sandbox.open_sandbox picks the backend
        r = sb.exec("cd /app && make", timeout=60)
        print(r.exit_code, r.output)

Both backends also expose, once started: `host_workdir` and `logs_dir` (host paths of the
workdir and /logs binds) and `notes` (what the sandbox could not provide, e.g. no offline
provisioning). `wall_s` in Limits ends the sandbox: exec raises SandboxError afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


class SandboxError(RuntimeError):
    """The sandbox could not be started, or died; the message says which and why."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox. None means "backend default"."""

    memory_mb: int | None = 4096
    max_processes: int | None = 512
    max_file_mb: int | None = 2048
    cpus: float | None = None
    wall_s: float | None = None  # whole-sandbox lifetime; exec timeouts are per command


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to start a sandbox for one task.

    workdir: path inside the sandbox that the agent works in (e.g. /app); it is a writable
        bind of a fresh host directory (`host_workdir`, created if None).
    env_layer: a built environment (see t1.sandbox.envbuild) applied copy-on-write, or None
        for the plain host root (bwrap) / a base image (apptainer).
    image: apptainer image (.sif path or docker:// URI); ignored by bwrap.
    logs_dir: host dir bound at /logs (created if None; `sandbox.logs_dir` tells where).
    provision: offline tool cache bound at /opt/t1 (t1.sandbox.provision); None = the default
        location ($T1_PROVISION or ~/.cache/t1/provision) if it exists.
    cow: copy-on-write system dirs (apt-get install works, host unchanged); False = read-only.
    tty_order: terminal writes of processes that run at once land in the order the processes
        started (t1.sandbox.tty_order), so a command prints the same bytes on every run;
        `run.deterministic` turns it on for every trajectory.
    """

    workdir: str = "/app"
    host_workdir: Path | None = None
    env_layer: Path | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    network: bool = False
    output_cap_bytes: int = 64 * 1024
    logs_dir: Path | None = None
    provision: Path | None = None
    cow: bool = True
    hostname: str = "sandbox"
    tty_order: bool = False


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one command in the persistent shell.

    output: stdout and stderr interleaved, capped (head and tail kept, cut marked).
    timed_out: the command ran past its timeout and was interrupted (exit_code is then 124).
    """

    exit_code: int
    output: str
    timed_out: bool = False
    truncated: bool = False
    seconds: float = 0.0


@runtime_checkable
class Sandbox(Protocol):
    def start(self) -> None: ...

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult: ...

    def put(self, src: Path, dst: str) -> None:
        """Copy a host file or directory to `dst` inside the sandbox."""
        ...

    def get(self, src: str, dst: Path) -> None:
        """Copy `src` inside the sandbox to the host path `dst`."""
        ...

    def stop(self) -> None:
        """Tear down: kill every process of the sandbox; idempotent."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...
