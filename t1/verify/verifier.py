"""The held-out verifier: run a task's tests where the agent cannot reach; per-assertion outcomes.

    from t1.verify.verifier import score_in_sandbox
    result = score_in_sandbox(task, sandbox)     # after the agent (or the oracle) acted
    result.passed, result.total, result.assertions, result.source, result.tampered

There is no command of its own; `t1 oracle` and the rollout call `score_in_sandbox`;
tests/test_reward_integrity.py attacks it (tests/data/attacks/).

The reward is the only thing PPO optimizes, so the agent is the adversary: root in its
sandbox (capabilities dropped), able to change any file the tests will see, to leave
processes behind, and to plant tools, startup files and plugins anywhere it can write.

How a bwrap sandbox is verified (t1.verify.hardened; t1.sandbox.compartment does the mounts;
an apptainer one the same way in a container of its own, with the differences listed under
"Not defended" below):
1. Stop the agent. Its cgroup is frozen and every process in it is killed, repeatedly until
   none appears, except bwrap's own, the idle protocol shell, and *services*: processes that
   hold a listening socket (Terminal-Bench tasks check servers the agent left running).
   Survivors stay in the agent's namespaces; the compartment joins their pid namespace (below).
2. The tests are copied, on the host, into a fresh private dir; the report dir is another.
3. The verifier runs in a new compartment (a second bwrap started from the host: new pid,
   mount, ipc, uts namespaces, all capabilities dropped but CAP_SETUID/CAP_SETGID (tests that
   run the agent's program as an unprivileged user), a cgroup of its own killed whole at
   the end) over the agent's filesystem — its /usr, /etc, /var overlays, workdir, /logs,
   tmp/root/home — and in the agent's network namespace. When services survive it has no pid
   namespace of its own but the agent's (`bwrap --pidns`, a /proc of it): a test that checks
   a service by the pid the agent wrote (`os.kill(pid, 0)`, /proc/PID, `kill -0`) finds it;
   the agent's other processes are dead by then, and the services (root, no capabilities)
   can neither ptrace nor open /proc/PID/fd of the runner or the harness (non-dumpable).
   Its root is a private overlay over the agent's root whose /tests, a fresh copy of the
   tests, is bound READ-ONLY (nothing in the compartment can change the tests before
   pytest collects them); bound over it privately: /logs/verifier, the harness (read-only)
   and the host's own /usr and /etc (read-only, at /run/t1/host), an empty
   /etc/ld.so.preload, the host's nsswitch.conf.
4. The script and the harness: for a verifier that runs pytest over test files (the script
   names pytest and /tests has test_*.py), the compartment's first process is our runner
   (t1/verify/script_runner.py: it alone holds the outcome fd) and it runs the task's script
   (v1 run-tests.sh, v2 tests/test.sh) AS WRITTEN under the host's bash: its cp, export, cd,
   installs (served offline by /opt/t1), the services it starts. Its calls of pytest —
   `pytest`, `py.test`, `python[3] -m pytest`, `uv run [python -m] pytest`, `uvx ... pytest`
   — are bash functions (exported, so nested bash scripts have them) and shims first on
   PATH that ask the runner, over a socket, to run OUR harness in their place, with the
   caller's stdio, cwd and environment: the runner accepts only callers descending from the
   script's bash, keeps the pytest options it knows (-k, -m, -x, -r.., --tb, ...; report
   and plugin options like --ctrf, --junitxml, -p X are dropped) and test files under /tests
   (a copy of one stands for it; none named: /tests), and hands pytest's exit status back.
   Several calls are several harness runs, merged (a test failing in any run fails); a
   script that never calls pytest has no outcomes: an error, no test passed. The interpreter
   is the one asked for (`-p X.Y`) where the provision holds it, else the host's python3.
   Each harness run: t1/verify/harness.py runs pytest on those files under the HOST's
   python3 started by the host's own dynamic loader (a copy the compartment can execute but
   not read, so the process is non-dumpable from its exec) and libraries (`--library-path`),
   in isolated mode without site (`-I -S`), with
   pytest and the packages the script asks for (`-w`, `uv add`, `pip install`) from a dir
   built on the host out of the provisioned wheelhouse; `-c` our pytest.ini (or the task's
   /tests/pytest.ini),
   `--rootdir /tests --confcutdir /tests` (a conftest.py in /tests is the task's and loads;
   none above it does), `-p no:cacheprovider`, plugin autoload off, no PYTEST_*/LD_* in the
   environment, PATH with /opt/t1/bin first. Outcomes leave through a pipe of the runner's
   whose write end the harness makes non-inheritable; the runner forwards each line on its
   own channel, tagged with the run; the report is what came through it
   before its end line ("junit" source: one assertion per test, parametrized cases
   separately; skipped/xfail/xpass count as passed), each record signed (HMAC, per-run key
   the agent's process never sees: t1.verify.hardened.check_signed). Files the tests or
   anything else write are not read.
   The agent's code never runs in that pytest process: the harness forks a child first (same
   compartment and limits; it closes the outcome fd at once), and an import hook in front of
   sys.meta_path (and importlib.util.spec_from_file_location) imports every module whose file
   is not the stdlib's, the harness's or /tests' in that child (t1.verify.proxy), compiled
   from source (no .pyc of anyone's). The tests hold remote handles (t1.verify.proxy_client):
   safe values (None, bool, numbers, str, bytes, containers, numpy arrays, paths, ...) cross
   by value through a strict decoder, the rest as handles (attributes, calls, iteration, len,
   getitem, repr, inspect.signature forwarded); ==, hash, truth and `in` are decided by the
   reporter; the agent's exceptions re-raise as their nearest builtin exception (SystemExit,
   KeyboardInterrupt, pytest's skip/xfail/fail outcomes become RuntimeError); a dead child
   fails every later call. Tamper telemetry in the reporter (audit events of gc, frames,
   ctypes, settrace from untrusted code; pytest/pluggy functions or plugins changed during
   the run; records it did not sign) marks the run `tampered` (scored as all failed). Tests still see the agent's files, packages (their subprocesses use the
   agent's /usr and PATH), exported Dockerfile ENV and services, as Terminal-Bench expects.
   Other verifiers (a reward file only) run their script under the host's bash by the host's
   loader; the reward file is read from the private report dir, symlinks not followed,
   after every process of the compartment is dead.
5. Checked against the task: when the task's pool recorded the assertion names of its
   reference run (`t1 pool --validated`: `assertion_names`), a report whose names or count
   differ is `tampered`: every recorded assertion counts as failed, the claim is kept in
   `reported`, the reason in `tampered` (the rollout writes it into the trajectory).

Defended (tests/data/attacks/, one task each): report files pre-placed, rewritten by a
detached or double-forked or respawning process, symlinked; /tests pre-made or overwritten
when it appears; the verifier killed; sitecustomize/usercustomize/.pth, pytest entry-point
plugins or a replaced pytest in any site dir; the stdlib edited; conftest.py / pytest.ini /
pyproject.toml / setup.cfg / tox.ini in every parent dir; fake uv/uvx/pytest/python3/curl
earlier on PATH, in /usr/local/bin and ~/.local/bin, /usr/bin/python3 or /usr/bin/bash
replaced; PYTHON*/PYTEST_*/BASH_ENV in /etc/environment, profile.d, bashrc; /etc/ld.so.preload;
poisoned uv/pip config and caches; a "service" (listener) that keeps rewriting; a program
the tests run that interrupts pytest (the tests it never reported count as failed). And from
inside a module the tests import (a17-a28, twin honest-imports): pytest's test call or
TestReport patched; a plugin registered through gc or sys.meta_path; forged records written to
the outcome fd (by number from sys.argv, or /proc/PPID/fd); always-equal objects and objects
lying about __class__/len/`in`; sys.exit(0) / os._exit(0) at import; a stale unchecked-hash
__pycache__ .pyc beside innocent source; test functions and the test module's globals
rewritten via gc and frames; pytest.skip()/xfail() called by the agent's code.

Not defended (and why):
* Tests that run the agent's programs (subprocesses) and trust their output, or that trust a
  library the agent could write (a module found on the agent's paths, e.g. the image's
  site-packages or one shadowed after `sys.path.insert(0, "/app")`: it is proxied, so it runs
  in the child, but whatever it answers is what the test checks): that is the task's design.
* Agent code reaching the reporter other than by import: `exec(open(...).read())`, `runpy`,
  `SourceFileLoader(...).load_module()` in the tests run it in the reporter (the telemetry
  still sees gc/frame/ctypes use and pytest changes from untrusted files). Values the agent's
  code computes are the agent's answers: arithmetic and ordering on handles are refused
  (TypeError), not forwarded. Fidelity costs of the proxy: a handle is always true and
  callable; a test's local objects reach the agent's code as call-only callbacks;
  `from mod import *` without `__all__` imports nothing; custom numeric types, subclasses of
  builtins (cross as the builtin; namedtuples as a local namedtuple) and identity (`is`) of
  values that crossed twice differ; the child's state does not survive its death.
* The telemetry is a speed bump: audit hooks do not see attribute assignment on instances
  or modules, and code that is running in the reporter could silence it; it matters only
  where the proxy is bypassed (above) or switched off (`t1 bench verifier`).
* A reward-file-only verifier runs its own script, and the tools it calls come from the
  agent's /usr: a planted `cat` or `grep` can make such a script write 1. Only pytest
  verifiers get per-assertion outcomes from our harness; pools of binary verifiers are for
  critic warm-up, and their tasks get the names check (one "reward" assertion) only.
* /tests is read-only: a test that moves /tests aside (lru-cache-with-cost-budget moves it
  to /tmp and back) fails now; the price of tests nothing can rewrite before collection.
* The script's own lines are the task's: a service or program it starts from the agent's
  files runs (as in Terminal-Bench) and may SIGKILL a harness run (an error, never a reward)
  or ask the runner for another run of the task's tests (merged worst-first: it cannot turn a
  failure into a pass; it can run tests the script's -k deselected, which the recorded names
  check catches). pytest called by an absolute path (/usr/bin/python3 -m pytest) is not
  intercepted: it reports nothing, so nothing passes. Other tools the script calls come from
  the agent's /usr (see the reward-file case below); what they do can deny outcomes, never
  forge them.
* A program the tests run shares the harness's pid namespace and uid: it can SIGKILL pytest.
  The result is then an error (no end line), and an error is never rewarded; it cannot
  forge outcomes (no ptrace, no /proc/PID/fd: the runner is non-dumpable, no capabilities).
* Services (listening processes) keep running while the tests run and may change the
  agent's files meanwhile; they cannot reach the tests, the report or the harness.
* Data files the host's libc reads from the agent's /etc (locale, hosts, ssl config is
  pointed at the host's) are not code; gconv modules would be, the harness does not use them.
* The apptainer backend (t1.sandbox.apptainer_verify) runs the same runner, harness, proxy
  and signed channel in a second container (`apptainer exec --containall --cleanenv`: new
  pid and ipc namespaces, no host home) of the instance's image over the instance's
  host-dir overlay mounted READ-ONLY with a --writable-tmpfs on top, /tests a read-only bind
  of the fresh copy, the harness and the host's /usr and /etc read-only, /dev/null over
  /etc/ld.so.preload, the instance's network (none when offline), its /tmp and home (the
  instance's `--workdir`). What apptainer cannot give as bwrap does: the agent is stopped
  by stopping the whole instance, so its services do not survive (tests that check a server
  the agent left running fail there); no private overlay root (the agent's /tests,
  /run and /.singularity.d are removed from its overlay's upper layer on the host instead:
  apptainer runs the image's env scripts before our argv, with the channel fd open); no
  cgroup of the verifier's own unless the site delegates cgroups; no CAP_SETUID for tests
  that drop to another user. Its argv is checked before it runs
  (`check_verify_args`) and kept beside the verifier's output. An apptainer sandbox
  without a host-dir overlay (T1_APPTAINER_OVERLAY=0) and other backends run the verifier
  in the agent's shell, under `env -i` with the sandbox's start env; only the names check
  and the reward clipping protect them. A bwrap sandbox when not root: no cgroup (nothing
  is killed), no nsenter (services are not reachable from the compartment).
* The kernel, bwrap and the host are trusted.

Fidelity costs: pytest runs under the host's python3 when the provision has no interpreter
of the version `uvx -p 3.13` asks for (the tests' subprocesses still get the image's `python`
on PATH); the packages of the harness's site are those the script's text installs (read on
the host, t1.sandbox.needs), not what its installs produced; pytest plugin options (--ctrf,
--timeout, -n) are dropped; the tests' cwd is the script's cwd at the call.

The report parsers (JUnit XML, the -rA summary, reward files; t1/verify/outcomes.py) serve
the shell path and the reward files. Names are `<test file stem>::<class>::<test>[<params>]`.
A verifier that times out, crashes or yields no outcomes gives a result with `error` set
(and total 0 when nothing was read); it never raises into the caller's run loop.

Where each part lives: the result and its check against the task (t1.verify.result), the shell
path (t1.verify.in_shell), the hardened path (t1.verify.hardened) and how it runs pytest
(t1.verify.pytest_plan).
"""

from __future__ import annotations

from t1.tasks.model import Task
from t1.verify.hardened import _score_hardened, compartment_kind
from t1.verify.in_shell import _score_in_shell
from t1.verify.result import VerifierResult, check_against, recorded_names


def score_in_sandbox(
    task: Task, sandbox, timeout: float | None = None, expected: list[str] | None = None
) -> VerifierResult:
    """Verify what was done in `sandbox` (agent or oracle already acted): never raises.

    A bwrap sandbox, or an apptainer one over a host-dir overlay, is verified in a compartment
    (hardened: `compartment_kind`); any other in its own shell (see the module docstring).
    `expected` (default: the names the task's pool recorded from its reference run,
    `recorded_names`) marks a report with other names `tampered`.
    """
    if compartment_kind(sandbox) is not None:
        result = _score_hardened(task, sandbox, timeout)
    else:
        result = _score_in_shell(task, sandbox, timeout)
    return check_against(result, recorded_names(task) if expected is None else expected)


VERIFIER_TRIES = 2


def score_retrying(
    task: Task, sandbox, tries: int | None = None
) -> tuple[VerifierResult, int, str | None, float]:
    """`score_in_sandbox`, again at twice the timeout while it errs (timed out, killed, no
    outcomes), at most `tries` runs (default VERIFIER_TRIES): a loaded machine's timeout is not the agent's failure,
    and under load it moved 4-5 of 128 held-out verdicts of a campaign (LOG.md, 2026-12-03),
    so a reward, or a pool's validation, that depends on the machine's load makes two runs of
    one campaign differ. A retry reports only what the tests report: an error is never
    rewarded, and the hardened verifier stops the agent and runs a fresh copy of the tests in a
    new compartment each time (the in-shell path runs them again in the agent's shell). The
    price: a program of the agent's that the tests wait on longer than the task's timeout gets
    twice it on the retry. Returns (result, runs, the first run's error, seconds of all runs).
    Used by the agent loop's reward (t1.agent.loop) and `t1 oracle` (t1.verify.oracle)."""
    tries = VERIFIER_TRIES if tries is None else tries
    v = score_in_sandbox(task, sandbox)
    seconds, first, n = v.seconds, v.error, 1
    while v.error and n < tries:
        n += 1
        v = score_in_sandbox(task, sandbox, timeout=task.verifier_timeout_s * 2 ** (n - 1))
        seconds += v.seconds
    return v, n, first, seconds
