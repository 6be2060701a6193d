"""Sandboxes: the `Sandbox` protocol (base.py) and its backends, bwrap and apptainer.

    from t1.sandbox import SandboxSpec, open_sandbox
    with open_sandbox(SandboxSpec(workdir="/app"), backend="bwrap") as sb:
        r = sb.exec("echo hi > f && cat f", timeout=10)    # ExecResult(exit_code=0, output="hi\\n")
        sb.put(Path("tests"), "/tests"); sb.get("/app/f", Path("out/f"))

`open_sandbox` starts the sandbox and returns it; use it as a context manager (or call
`stop()`), so that every process of the sandbox is killed at the end.

Pipeline stage 3 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise.
"""

from __future__ import annotations

from t1.sandbox.base import ExecResult, Limits, Sandbox, SandboxError, SandboxSpec

BACKENDS = ("bwrap", "apptainer")


def make_sandbox(spec: SandboxSpec, backend: str = "bwrap") -> Sandbox:
    """A sandbox object for `backend`, not started yet."""
    if backend == "bwrap":
        from t1.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(spec)
    if backend == "apptainer":
        from t1.sandbox.apptainer import ApptainerSandbox

        return ApptainerSandbox(spec)
    raise ValueError(f"unknown sandbox backend {backend!r} (known: {', '.join(BACKENDS)})")


def spec_from_config(cfg: object, **fields: object) -> SandboxSpec:
    """A SandboxSpec from the config's `sandbox:` section (t1.config.SandboxConfig) + fields."""
    from pathlib import Path

    base: dict[str, object] = {
        "limits": Limits(
            memory_mb=cfg.memory_mb, max_processes=cfg.max_processes, max_file_mb=cfg.max_file_mb
        ),
        "output_cap_bytes": cfg.output_cap_bytes,
        "cow": cfg.cow,
    }
    if cfg.provision_dir:
        base["provision"] = Path(cfg.provision_dir).expanduser()
    base.update(fields)
    return SandboxSpec(**base)


def open_sandbox(spec: SandboxSpec, backend: str = "bwrap") -> Sandbox:
    """Start a sandbox for `spec` with `backend` (bwrap | apptainer); stop() or `with` ends it."""
    sb = make_sandbox(spec, backend)
    sb.start()
    return sb


__all__ = [
    "BACKENDS",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "make_sandbox",
    "open_sandbox",
    "spec_from_config",
]
