"""A task's environment and its sandbox: build the environment layer, open a fresh sandbox for
the task, and run the task's reference solution in it.

    spec = task_spec(task, backend="bwrap")                 # workdir, env layer, limits
    with open_task_sandbox(task, backend="bwrap") as sb:     # agent or solution acts in sb ...
        error = run_solution(task, sb)                       # ... the reference solution
        result = score_in_sandbox(task, sb)                  # (t1.verify.verifier) then verify

The environment is built (t1.sandbox.envbuild, cached by content hash) only when the task's
Dockerfile changes the machine (RUN, COPY, ENV, ...); with the apptainer backend the task's
image is pulled or built into a .sif instead. The rollout (t1.rollout.collect), the synthesizer
(t1.synth.validate) and `t1 oracle` (t1/verify/oracle.py, the command) all open sandboxes through here.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from t1.sandbox import Limits, SandboxSpec, open_sandbox
from t1.tasks.load import dockerfile_instructions
from t1.tasks.model import Task

__all__ = [
    "DEFAULT_ENV_CACHE",
    "build_task_env",
    "needs_build",
    "open_task_sandbox",
    "run_solution",
    "task_spec",
]

DEFAULT_ENV_CACHE = Path("~/.cache/t1/env").expanduser()
_TRIVIAL = {"FROM", "WORKDIR", "LABEL", "MAINTAINER", "CMD", "ENTRYPOINT", "EXPOSE"}


def needs_build(task: Task) -> bool:
    """True when the task's Dockerfile changes the machine (RUN, COPY, ENV, ARG, ...)."""
    df = task.environment.dockerfile
    if df is None or not df.is_file():
        return False
    return any(word not in _TRIVIAL for word, _ in dockerfile_instructions(df))


def build_task_env(task: Task, cache_dir: Path | None = None) -> Path | None:
    """The task's environment layer (built once, then cached by content hash), or None."""
    if not needs_build(task):
        return None
    from t1.sandbox.envbuild import build_env

    env = task.environment
    return build_env(env.dockerfile, env.context, Path(cache_dir or DEFAULT_ENV_CACHE)).path


def task_spec(
    task: Task,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    limits: Limits | None = None,
    network: str = "never",
) -> SandboxSpec:
    """The sandbox spec of a task: workdir, built environment (or image), resource limits.

    `network` is the config's sandbox.network: "never" keeps every sandbox offline, even when
    a task sets allow_internet (installers reach the offline provision cache, t1 provision);
    "task" gives a network to the tasks that set allow_internet. A `FROM python:X.Y` task gets
    T1_IMAGE_PYTHON=X.Y, so `python` and `pip` resolve as in that image (README, the sandbox).
    """
    if network not in ("never", "task"):
        raise ValueError(f"sandbox.network must be never | task, got {network!r}")
    base = limits or Limits()
    limits = Limits(
        memory_mb=task.resources.memory_mb or base.memory_mb,
        max_processes=base.max_processes,
        max_file_mb=base.max_file_mb,
        cpus=task.resources.cpus or base.cpus,
        wall_s=base.wall_s,
    )
    image = None
    env_layer = None
    if backend == "apptainer":
        image = _apptainer_image(task)
    else:
        env_layer = build_task_env(task, cache_dir)
    from t1.sandbox.needs import task_image_python

    image_py = task_image_python(task) if backend == "bwrap" else None
    return SandboxSpec(
        workdir=task.workdir,
        env_layer=env_layer,
        image=image,
        limits=limits,
        network=network == "task" and task.resources.allow_internet,
        env={"T1_IMAGE_PYTHON": image_py} if image_py else {},
    )


def _apptainer_image(task: Task) -> str | None:
    """The task's .sif: its docker_image pulled, or its Dockerfile built (cached by content)."""
    from t1.sandbox.apptainer import ensure_image

    env = task.environment
    if env.docker_image is None and env.dockerfile is None:
        return None
    sif = ensure_image(
        docker_image=env.docker_image, dockerfile=env.dockerfile, context=env.context
    )
    return str(sif)


def open_task_sandbox(
    task: Task,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    limits: Limits | None = None,
    network: str = "never",
):
    """A started sandbox for `task` (use it with `with`); the tests and solution are not in it."""
    return open_sandbox(task_spec(task, backend, cache_dir, limits, network), backend)


def run_solution(task: Task, sandbox) -> str | None:
    """Run the reference solution in the sandbox's shell; return an error message or None.

    v1 solution.sh is copied to /oracle/solution.sh, v2 solution/ to /solution/, only now;
    solution.yaml runs each command in turn. The whole solution shares the task's agent
    timeout. Its exit code is returned in the message only when non-zero (the caller decides
    whether that matters).
    """
    wd = shlex.quote(task.workdir)
    budget = task.agent_timeout_s
    t0 = time.monotonic()
    sol = task.solution
    if sol.kind == "commands":
        steps = [f"cd {wd}", *sol.commands]
    elif task.layout == "v1":
        sandbox.put(sol.path, "/oracle/solution.sh")
        steps = [f"cd {wd} && bash /oracle/solution.sh"]
    else:
        sandbox.put(sol.directory or sol.path.parent, "/solution")
        steps = [f"cd {wd} && bash /solution/{sol.path.name}"]
    for i, cmd in enumerate(steps):
        left = budget - (time.monotonic() - t0)
        if left <= 0:
            return f"reference solution timed out after {budget:g} s (before step {i + 1} of {len(steps)})"
        r = sandbox.exec(cmd, timeout=left)
        if r.timed_out:
            return f"reference solution timed out after {budget:g} s (the agent timeout)"
        if r.exit_code != 0:
            return f"reference solution exited {r.exit_code}: {r.output.strip()[-400:]}"
    return None
