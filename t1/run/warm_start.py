"""Warm-started step commands: the segment driver imports once what `t1 rollout` and `t1 train`
import, and forks each step's command from itself instead of starting a fresh Python.

On the tiny config a PPO step is about 20 s, and each of its two commands spent about 3 s
importing torch, transformers, the model's modeling module and t1 (plus `torch._inductor.config`,
which `torch.use_deterministic_algorithms` imports) before doing anything: close to a third of
the step. Here those imports happen once per segment (`preload`), and `fork_command` runs the
command in a forked child that starts with them in memory: 14.7 s per step against 20.5, the
actors bit-identical (`t1 bench segment`; LOG.md, 2026-12-05, sixteenth session).

The child is the same command as `t1 ARGV` started afresh, as far as its work can tell:

* nothing of torch has run in the driver (imports only: no tensor op, no thread pool, no
  `set_num_threads`), so the child's threads, RNG and flags are set by the child as they would
  be in a new process; `MKL_DYNAMIC` is set by t1.cli before torch loads, in both; the driver
  forks only while it has one Python thread (`python_threads`);
* stdin is /dev/null, stdout and stderr go to one pipe the driver reads (as with Popen);
* the signals the driver catches (SIGTERM, SIGUSR2 flag handlers, t1.supervise.child) get
  their default dispositions back and SIGINT Python's own handler, so `t1 train`'s SIGUSR2
  checkpoint-and-exit and the rollout's death by SIGTERM work as before;
* it dies with the driver (PR_SET_PDEATHSIG, as `die_with_parent` for Popen) and it does not
  keep the driver's output lock (t1.store.lock.forget_inherited_locks);
* it runs what `python -m t1.cli ARGV` runs (runpy; the subcommand modules come from memory),
  and its exit status is the SystemExit's code as Python turns it into one, or 1 after an
  uncaught exception's traceback; atexit functions run, then `os._exit`,
  so nothing of the driver (its finalizers, buffered output) runs twice.

What differs: `/proc/PID/cmdline` (and so `ps`) shows the driver's command line; `sys.argv`
and the output locks record the child's own. A module the list misses is imported by the
child as before: the list decides the speed, never the result.
`campaign.warm_start: false` (or a launcher, t1/run/segment_fleet.py: `srun` job steps) runs
each command as a fresh process.
"""

from __future__ import annotations

import atexit
import importlib
import io
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

# what `t1 rollout` (local engine) and `t1 train --stage ppo` import on the way to their work,
# heaviest first (python -X importtime of both; 2026-12-05)
PRELOAD = (
    "torch",
    "torch._inductor.config",  # torch.use_deterministic_algorithms imports it: ~1 s
    "transformers",
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "transformers.activations",
    "torch.utils.tensorboard",
    "t1.model.policy",
    "t1.agent.loop",
    "t1.agent.tokenizer",
    "t1.engine.fleet",
    "t1.engine.local",
    "t1.engine.lean",
    "t1.rollout.collect",
    "t1.sandbox",
    "t1.tito",
    "t1.verify.verifier",
    "t1.train.cli",
    "t1.train.ppo",
    "t1.train.step",
    "t1.train.hf",
    "t1.train.critic_warmup",
)

# dispositions a fresh Python starts with, for the signals a driver may catch
_RESET = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGALRM)


def preload(arch: str | None = None, modules: tuple[str, ...] = PRELOAD) -> tuple[int, float]:
    """Import `modules` (and the causal-LM class of model arch `arch`, with transformers'
    checkpoint conversion mapping: `warm_conversion_mapping`); (modules new, seconds).

    A module that fails to import is left to the child, which reports it as it always did."""
    t0, before = time.monotonic(), len(sys.modules)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the child imports it again and says what is wrong
            pass
    if arch:
        try:
            from t1.model.policy import _causal_lm_class

            _causal_lm_class(arch)
        except Exception:  # noqa: BLE001 - as above
            pass
        warm_conversion_mapping(arch)
    return len(sys.modules) - before, time.monotonic() - t0


def warm_conversion_mapping(model_type: str) -> bool:
    """Build transformers' checkpoint conversion mapping here, once: `from_pretrained` builds
    it on first use for every model type it knows (~1,000 regexes compiled, 0.25 s of each
    forked rollout's and trainer's 0.37 s `load_policy`) and keeps it in a module global, which
    a forked child inherits. Only a cache: a transformers without it, or an error, changes
    nothing but the speed (False)."""
    try:
        from transformers import conversion_mapping

        conversion_mapping.get_checkpoint_conversion_mapping(model_type)
    except Exception:  # noqa: BLE001 - the child builds it as before
        return False
    return True


def python_threads() -> int:
    """Python threads of this process: forking is safe with one (another may hold a lock -
    logging's, an import's - that stays held forever in the child); the driver starts fresh
    processes when there are more. Native pools the imports start are fork-safe: numpy's
    OpenBLAS shuts its workers down before a fork (its pthread_atfork handler) and starts them
    again when next used; torch's OpenMP pool does not exist until an op runs, and none runs
    in the driver."""
    return threading.active_count()


class ForkedCommand:
    """The part of `subprocess.Popen` the segment driver uses, for a forked `t1` command."""

    def __init__(self, pid: int, read_fd: int) -> None:
        self.pid = pid
        self.stdout = os.fdopen(read_fd, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def exit_code(e: SystemExit) -> int:
    """The status Python exits with for `e` (a str code is printed to stderr, status 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def fork_command(argv: list[str], main: Callable[[list[str]], int | None] | None = None):
    """Run `t1 ARGV` (argv without the leading "t1") in a child forked from this process; a
    ForkedCommand. `main` (tests) stands in for t1.cli.main."""
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        os.close(w)
        return ForkedCommand(pid, r)
    code = 1
    try:
        _become_child(r, w)
        sys.argv = ["t1", *argv]
        if main is None:  # what `python -m t1.cli ARGV` runs: its SystemExit is the status
            runpy.run_module("t1.cli", run_name="__main__", alter_sys=True)
            code = 0
        else:
            code = int(main(list(argv)) or 0)
    except SystemExit as e:
        code = exit_code(e)
    except BaseException:  # noqa: BLE001 - as an uncaught exception in a fresh interpreter
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _become_child(r: int, w: int) -> None:
    from t1.store.lock import die_with_parent, forget_inherited_locks

    die_with_parent()
    os.close(r)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(w, 1)
    os.dup2(w, 2)
    os.close(w)
    for sig in _RESET:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    forget_inherited_locks()
    # standard streams on fds 0-2 as a fresh Python makes them (the driver's may be another
    # object: a test's capture): stdout block-buffered on the pipe, stderr line-buffered, both
    # unbuffered under PYTHONUNBUFFERED (as t1 supervise runs its children)
    enc = getattr(sys.__stdout__, "encoding", None) or "utf-8"
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def out(fd: int, **kw) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "w", closefd=False)
        buf = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(buf, encoding=enc, write_through=unbuffered, **kw)

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=enc)
    sys.stdout = sys.__stdout__ = out(1)
    sys.stderr = sys.__stderr__ = out(2, errors="backslashreplace", line_buffering=True)
    # the driver's atexit functions are the driver's: the child runs only its own
    atexit._clear()
