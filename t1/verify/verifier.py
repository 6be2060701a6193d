"""The held-out verifier: run a task's tests where the agent cannot reach; per-assertion outcomes.

    from t1.verify.verifier import score_in_sandbox
    result = score_in_sandbox(task, sandbox)     # after the agent (or the oracle) acted
    result.passed, result.total, result.assertions, result.source, result.tampered

There is no command of its own; `t1 oracle` and the rollout call `score_in_sandbox`;
tests/test_reward_integrity.py attacks it (tests/data/attacks/).

The reward is the only thing PPO optimizes, so the agent is the adversary: root in its
sandbox (capabilities dropped), able to change any file the tests will see, to leave
processes behind, and to plant tools, startup files and plugins anywhere it can write.

How a bwrap sandbox is verified (`_score_hardened`; t1.sandbox.compartment does the mounts):
1. Stop the agent. Its cgroup is frozen and every process in it is killed, repeatedly until
   none appears, except bwrap's own, the idle protocol shell, and *services*: processes that
   hold a listening socket (Terminal-Bench tasks check servers the agent left running).
   Survivors stay in the agent's namespaces, which never contain anything below.
2. The tests are copied, on the host, into a fresh private dir; the report dir is another.
3. The verifier runs in a new compartment (a second bwrap started from the host: new pid,
   mount, ipc, uts namespaces, all capabilities dropped but CAP_SETUID/CAP_SETGID (tests that
   run the agent's program as an unprivileged user), a cgroup of its own killed whole at
   the end) over the agent's filesystem — its /usr, /etc, /var overlays, workdir, /logs,
   tmp/root/home — and in the agent's network namespace when services survive. Its root is
   a private overlay whose /tests is a fresh writable copy of the tests (the tests may move
   it), over the agent's root; bound over it privately: /logs/verifier, the harness (read-only) and the host's own /usr and
   /etc (read-only, at /run/t1/host), an empty /etc/ld.so.preload, the host's nsswitch.conf.
4. The harness: for a verifier that runs pytest over test files (the script names pytest and
   /tests has test_*.py), the task's script is NOT run; t1/verify/harness.py runs pytest on
   the files the script names, under the HOST's python3 started by the host's own dynamic
   loader and libraries (`--library-path`), in isolated mode without site (`-I -S`), with
   pytest and the packages the script asks for (`-w`, `uv add`, `pip install`) from a dir
   built on the host out of the provisioned wheelhouse; `-c` our pytest.ini (or the task's
   /tests/pytest.ini),
   `--rootdir /tests --confcutdir /tests` (a conftest.py in /tests is the task's and loads;
   none above it does), `-p no:cacheprovider`, plugin autoload off, no PYTEST_*/LD_* in the
   environment, PATH with /opt/t1/bin first. Outcomes leave through a pipe whose write end
   the runner makes non-inheritable and non-dumpable; the report is what came through it
   before its end line ("junit" source: one assertion per test, parametrized cases
   separately; skipped/xfail/xpass count as passed). Files the tests or anything else write
   are not read. Tests still see the agent's files, packages (their subprocesses use the
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
the tests run that interrupts pytest (the tests it never reported count as failed).

Not defended (and why):
* Tests that import the agent's code, or run the agent's programs and trust their output, run
  that code inside or beside pytest: it can change outcomes like any solution could. That is
  the task's design (t1/synth/steps.py runs agent code only in subprocesses; the audit's
  tamper probe checks the rest).
* A reward-file-only verifier runs its own script, and the tools it calls come from the
  agent's /usr: a planted `cat` or `grep` can make such a script write 1. Only pytest
  verifiers get per-assertion outcomes from our harness; pools of binary verifiers are for
  critic warm-up, and their tasks get the names check (one "reward" assertion) only.
* A test that moves /tests aside (lru-cache-with-cost-budget moves it to /tmp) puts the tests
  where the agent's services can read them until they are moved back: the task's choice.
* A program the tests run shares the harness's pid namespace and uid: it can SIGKILL pytest.
  The result is then an error (no end line), and an error is never rewarded; it cannot
  forge outcomes (no ptrace, no /proc/PID/fd: the runner is non-dumpable, no capabilities).
* Services (listening processes) keep running while the tests run and may change the
  agent's files meanwhile; they cannot reach the tests, the report or the harness.
* Data files the host's libc reads from the agent's /etc (locale, hosts, ssl config is
  pointed at the host's) are not code; gconv modules would be, the harness does not use them.
* The apptainer backend (no second container over the same writable overlay yet) runs the
  verifier in the agent's shell as before, under `env -i` with the sandbox's start env; only
  the names check and the reward clipping protect it. Same when not root (no cgroup: nothing
  is killed; no nsenter: services are not reachable from the compartment).
* The kernel, bwrap and the host are trusted.

Fidelity costs: pytest runs under the host's python3 whatever `uvx -p 3.13` or the image's
Python asks for (the tests' subprocesses still get the image's `python` on PATH); a script's
own setup lines before pytest (exports, `cd`, services it starts) do not run — the task's
`[verifier] env` and the sandbox's start env (Dockerfile ENV) do reach the tests; the tests'
cwd is the workdir; `-k` and other pytest options of the script are not honoured.

The report parsers (JUnit XML, the -rA summary, reward files; t1/verify/outcomes.py) serve
the shell path and the reward files. Names are `<test file stem>::<class>::<test>[<params>]`.
A verifier that times out, crashes or yields no outcomes gives a result with `error` set
(and total 0 when nothing was read); it never raises into the caller's run loop.

The shell path (other backends), as the Terminal-Bench harnesses run it: /tests and
/logs/verifier are made fresh, the tests copied in; v1 `bash /tests/run-tests.sh` from the
workdir with TEST_DIR=/tests (`run_tests_in_same_shell: true`: in the agent's shell), v2
`bash /tests/test.sh` with the task's `[verifier] env`; both with PYTEST_ADDOPTS=
"--junitxml=/logs/verifier/junit.xml -o junit_family=xunit1 -rA", output to
/logs/verifier/test-output.txt; outcomes from junit.xml, else the -rA summary (XPASS passed,
where terminal-bench's own parser counts it failed), else reward.txt / reward.json (one
assertion "reward", passed iff >= 1).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import shlex
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from t1.tasks.model import Task
from t1.verify.outcomes import (  # noqa: F401 - re-exported: t1.verify.verifier is the entry point
    OUTCOMES,
    PASSING,
    Assertion,
    _nodeid_name,
    outcomes_from,
    parse_junit,
    parse_reward_file,
    parse_summary,
)

LOG_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
JUNIT_PATH = f"{LOG_DIR}/junit.xml"
OUTPUT_PATH = f"{LOG_DIR}/test-output.txt"
PYTEST_ADDOPTS = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1 -rA"
OUTPUT_KEEP_CHARS = 8000  # tail of the verifier output kept in the result
_MAX_READ_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class VerifierResult:
    assertions: list[Assertion] = field(default_factory=list)
    source: str = "none"  # junit | summary | reward_file | none
    exit_code: int | None = None
    output: str = ""  # tail of the verifier's output
    error: str | None = None
    reward_value: float | None = None  # what reward.txt / reward.json said, if present
    seconds: float = 0.0
    tampered: str | None = None  # why the report was rejected (then every assertion failed)
    reported: list[Assertion] = field(default_factory=list)  # what a rejected report claimed
    hardened: bool = False  # ran in the verifier compartment (see the module docstring)
    notes: list[str] = field(default_factory=list)  # services left running, processes killed

    @property
    def passed(self) -> int:
        return sum(a.ok for a in self.assertions)

    @property
    def total(self) -> int:
        return len(self.assertions)

    @property
    def resolved(self) -> bool:
        return self.total > 0 and self.passed == self.total


# --------------------------------------------------------------------------- running


def verifier_command(task: Task, base_env: dict[str, str] | None = None) -> str:
    """The shell line that runs the task's verifier inside its sandbox (output to a log file).

    `base_env` is the environment the sandbox started with (`sandbox.base_env`). When given,
    the verifier runs under `env -i` with exactly that environment, so nothing the agent
    exported (PATH to a fake `python3` or `uvx`, PYTHONPATH, PYTEST_PLUGINS ...) reaches it —
    the files and processes the agent left behind do, as in a harness that execs a new shell
    into the same container. v1 tasks with `run_tests_in_same_shell` run in the agent's shell
    as they ask.
    """
    env = {"PYTEST_ADDOPTS": PYTEST_ADDOPTS, **dict(task.verifier.env)}
    if task.layout == "v1":
        env["TEST_DIR"] = TESTS_DIR
        script = f"{TESTS_DIR}/run-tests.sh"
    else:
        script = f"{TESTS_DIR}/{task.verifier.script.name}"
    redirect = f"> {OUTPUT_PATH} 2>&1 < /dev/null"
    same_shell = task.layout == "v1" and task.run_tests_in_same_shell
    if base_env is not None and not same_shell:
        env = {**base_env, **env}
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"(cd {shlex.quote(task.workdir)} && env -i {assigns} bash {script}) {redirect}"
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    run = f"env {assigns} bash {script}"
    if same_shell:
        return f"{run} {redirect}"
    return f"(cd {shlex.quote(task.workdir)} && {run}) {redirect}"


def copy_tests_in(task: Task, sandbox) -> None:
    """Fresh /tests and /logs/verifier, then the task's tests (and v1 run-tests.sh) into /tests."""
    r = sandbox.exec(f"rm -rf {TESTS_DIR} {LOG_DIR} && mkdir -p {TESTS_DIR} {LOG_DIR}", timeout=60)
    if r.exit_code != 0:
        raise RuntimeError(
            f"could not prepare {TESTS_DIR} and {LOG_DIR}: {r.output.strip()[-500:]}"
        )
    tests = task.verifier.tests_dir
    if tests is not None and tests.is_dir():
        for item in sorted(tests.iterdir()):
            sandbox.put(item, f"{TESTS_DIR}/{item.name}")
    if task.layout == "v1":
        sandbox.put(task.verifier.script, f"{TESTS_DIR}/run-tests.sh")


def _score_in_shell(task: Task, sandbox, timeout: float | None = None) -> VerifierResult:
    """The verifier in the agent's own shell (backends without a compartment): NOT hardened."""
    t0 = time.monotonic()
    timeout = timeout or task.verifier_timeout_s
    try:
        copy_tests_in(task, sandbox)
        r = sandbox.exec(
            verifier_command(task, getattr(sandbox, "base_env", None)), timeout=timeout
        )
    except Exception as e:  # the sandbox died or refused: a verifier error, not a crash
        return VerifierResult(error=f"verifier could not run: {e}", seconds=time.monotonic() - t0)
    files = _fetch(
        sandbox, [JUNIT_PATH, OUTPUT_PATH, f"{LOG_DIR}/reward.txt", f"{LOG_DIR}/reward.json"]
    )
    output = files[OUTPUT_PATH] or r.output
    assertions, source, reward_value, problem = outcomes_from(
        files[JUNIT_PATH], output, files[f"{LOG_DIR}/reward.txt"], files[f"{LOG_DIR}/reward.json"]
    )
    error = None
    if r.timed_out:
        error = f"verifier timed out after {timeout:g} s"
    elif problem:
        error = f"verifier produced no outcomes (exit {r.exit_code}): {problem}"
    if error:
        tail = output.strip()[-400:]
        error += f"; output tail: {tail}" if tail else "; no output"
    return VerifierResult(
        assertions=assertions,
        source=source,
        exit_code=r.exit_code,
        output=output[-OUTPUT_KEEP_CHARS:],
        error=error,
        reward_value=reward_value,
        seconds=time.monotonic() - t0,
    )


def _fetch(sandbox, paths: list[str]) -> dict[str, str | None]:
    """Read files out of the sandbox (None for a file that is not there)."""
    out: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="t1-verifier-") as tmp:
        for i, src in enumerate(paths):
            dst = Path(tmp) / f"{i}-{PurePosixPath(src).name}"
            try:
                sandbox.get(src, dst)
            except Exception:
                out[src] = None
                continue
            if not dst.is_file():
                out[src] = None
                continue
            with dst.open("rb") as fh:
                out[src] = fh.read(_MAX_READ_BYTES).decode("utf-8", errors="replace")
    return out


# --------------------------------------------------------------------------- the hardened path

HARNESS_SOURCE = Path(__file__).with_name("harness.py")
PYTEST_INI = (
    "[pytest]\n"  # our own: a pytest.ini / pyproject.toml / setup.cfg planted anywhere is not read
)
_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")
_DROP_ENV = ("PYTEST_", "LD_", "BASH_ENV", "ENV", "BASH_FUNC_")


def score_in_sandbox(
    task: Task, sandbox, timeout: float | None = None, expected: list[str] | None = None
) -> VerifierResult:
    """Verify what was done in `sandbox` (agent or oracle already acted): never raises.

    A bwrap sandbox is verified in the compartment (hardened); any other backend in its own
    shell (see the module docstring). `expected` (default: the names the task's pool recorded
    from its reference run, `recorded_names`) marks a report with other names `tampered`.
    """
    if getattr(sandbox, "plan", None) is not None and hasattr(sandbox, "cgroup"):
        result = _score_hardened(task, sandbox, timeout)
    else:
        result = _score_in_shell(task, sandbox, timeout)
    return check_against(result, recorded_names(task) if expected is None else expected)


def pytest_plan(task: Task) -> tuple[list[str], list[str]] | None:
    """(pytest targets inside /tests, pip specs) when the verifier is pytest over test files.

    None: no test_*.py / *_test.py in the tests dir, or a script that never names pytest; such a
    verifier is run as its script (its reward file is the outcome). Targets are the script's
    arguments that name files or dirs under /tests ($TEST_DIR too); none named = /tests.
    """
    from t1.sandbox.needs import script_needs

    tests = task.verifier.tests_dir
    script = task.verifier.script
    text = script.read_text(errors="replace") if script is not None and script.is_file() else ""
    has_py = (
        tests is not None
        and tests.is_dir()
        and any(_TEST_FILE.search(p.name) for p in tests.rglob("*.py"))
    )
    if not has_py or "pytest" not in text:
        return None
    targets: list[str] = []
    for word in re.findall(r"[^\s;&|'\"()<>]+", text.replace("${TEST_DIR}", "$TEST_DIR")):
        word = word.replace("$TEST_DIR", TESTS_DIR)
        if word.startswith(TESTS_DIR + "/") and (word.endswith(".py") or "::" in word):
            path = word.split("::", 1)[0]
            if (tests / path[len(TESTS_DIR) + 1 :]).exists() and word not in targets:
                targets.append(word)
    specs = [s for s in script_needs(text).pip_specs() if not s.startswith(("-", "."))]
    if not any(re.match(r"pytest\b(?![-_])", s) for s in specs):
        specs.append("pytest")
    return targets or [TESTS_DIR], specs


def _ini(tests_dir: Path, harness_inside: str) -> str:
    """The task's own /tests/pytest.ini (markers, options: it is the task's, like its
    conftest.py), else ours; never one found by pytest's search above /tests or in the cwd."""
    if (tests_dir / "pytest.ini").is_file() and not (tests_dir / "pytest.ini").is_symlink():
        return f"{TESTS_DIR}/pytest.ini"
    return f"{harness_inside}/pytest.ini"


def _tail_paths(task: Task) -> list[str]:
    """`--tail-path` args: the agent's site dirs when the script runs the system Python's pytest
    (plain `pytest`, `python -m pytest`); none under uv / uvx, whose envs are isolated too."""
    script = task.verifier.script
    text = script.read_text(errors="replace") if script is not None and script.is_file() else ""
    if re.search(r"\buvx\b|\buv\s+run\b", text):
        return []
    ver = re.search(r"python(3\.\d+)$", os.path.realpath("/usr/bin/python3"))
    v = ver.group(1) if ver else "3"
    dirs = [f"/usr/local/lib/python{v}/dist-packages", "/usr/lib/python3/dist-packages",
            f"/usr/local/lib/python{v}/site-packages"]  # fmt: skip
    return [x for d in dirs for x in ("--tail-path", d)]


def harness_env(task: Task, base_env: dict[str, str] | None) -> dict[str, str]:
    """The compartment's environment: the sandbox's start env and the task's verifier env,
    without PYTEST_*, LD_*, BASH_ENV (they change how pytest reports or what every process
    loads), with a PATH of our tools first and the harness's own TMPDIR."""
    from t1.sandbox.bwrap import BASE_PATH
    from t1.sandbox.compartment import HOST_VIEW, TMP_INSIDE

    env = {**(base_env or {}), **dict(task.verifier.env)}
    env = {k: v for k, v in env.items() if not k.startswith(_DROP_ENV)}
    start = (base_env or {}).get("PATH", BASE_PATH).split(":")  # ours and the task's
    path = ["/opt/t1/bin", *(d for d in start if d and d != "/opt/t1/bin")]
    env.update(
        PATH=":".join(dict.fromkeys(path)),
        TEST_DIR=TESTS_DIR,
        HOME="/root",
        USER="root",
        LOGNAME="root",
        TMPDIR=TMP_INSIDE,
        OPENSSL_CONF=f"{HOST_VIEW}/etc/ssl/openssl.cnf",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    return env


def merge_records(records: list[dict]) -> tuple[list[Assertion], str | None]:
    """Assertions from the harness's channel records; (…, problem) when there is no end line.

    A collected test without an outcome (the run was interrupted) counts as failed, so an
    interrupted run never reports fewer assertions than the task has.
    """
    merged: dict[str, str] = {}
    collected: list[str] = []
    end = None
    for rec in records:
        if rec.get("end"):
            end = rec
            break
        if isinstance(rec.get("collected"), list):
            collected += [_nodeid_name(str(n)) for n in rec["collected"]]
            continue
        name, outcome = rec.get("name"), rec.get("outcome")
        if not isinstance(name, str) or outcome not in OUTCOMES:
            return [], f"malformed harness record {rec!r}"
        name = _nodeid_name(name)
        prev = merged.get(name)  # a teardown error fails a test whose call passed
        if prev is None or (prev in PASSING and outcome not in PASSING):
            merged[name] = outcome
    for name in collected:
        merged.setdefault(name, "failed")
    out = [Assertion(n, o) for n, o in merged.items()]
    if end is None:
        return out, "the harness ended without its end record (killed, or pytest crashed)"
    return out, None


def _score_hardened(task: Task, sandbox, timeout: float | None) -> VerifierResult:
    """Stop the agent, then run the verifier in the compartment (t1.sandbox.compartment)."""
    from t1.sandbox import compartment as comp
    from t1.sandbox.provision import locate

    t0 = time.monotonic()
    timeout = timeout or task.verifier_timeout_s
    notes: list[str] = []
    shell = sandbox.shell
    launcher = shell.proc.pid if shell is not None and shell.proc is not None else None
    try:
        stopped = comp.stop_agent(sandbox.cgroup, launcher)
    except Exception as e:  # noqa: BLE001 - the verifier never raises into the run loop
        return VerifierResult(error=f"could not stop the agent's processes: {e}", hardened=True)
    drain = _PtyDrain(shell)  # services may still write to the agent's terminal
    notes.append(f"agent processes killed: {stopped.killed}")
    if stopped.services:
        notes.append(
            "services left running: "
            + "; ".join(f"{p} {c[:80]}" for p, c in sorted(stopped.services.items()))
        )
    vdir = sandbox.plan.root / "verifier"
    try:
        plan = pytest_plan(task)
        tests_dir, vlogs, harness = vdir / "tests", vdir / "logs", vdir / "harness"
        for d in (tests_dir, vlogs, harness / "site"):
            d.mkdir(parents=True, exist_ok=True)
        src = task.verifier.tests_dir
        if src is not None and src.is_dir():
            shutil.copytree(src, tests_dir, dirs_exist_ok=True, symlinks=False)
        if task.layout == "v1":
            shutil.copy2(task.verifier.script, tests_dir / "run-tests.sh")
        shutil.copy2(HARNESS_SOURCE, harness / HARNESS_SOURCE.name)
        (harness / "pytest.ini").write_text(PYTEST_INI)
        pristine = comp.Pristine.detect()
        env = harness_env(task, getattr(sandbox, "base_env", None))
        prov = locate(sandbox.spec.provision)
        if plan is not None:
            targets, specs = plan
            if prov is None:
                raise RuntimeError(
                    "no provision cache (run `t1 provision`): the harness needs pytest"
                )
            site = comp.harness_site(prov.root, specs)
            argv = pristine.argv("/usr/bin/python3") + [
                "-I", "-S", f"{comp.HARNESS_INSIDE}/{HARNESS_SOURCE.name}", "--fd", "{fd}",
                "--site", f"{comp.HARNESS_INSIDE}/site", *_tail_paths(task), "--", *targets,
                "-c", _ini(tests_dir, comp.HARNESS_INSIDE), "--rootdir", TESTS_DIR,
                "--confcutdir", TESTS_DIR, "-p", "no:cacheprovider", "-rA",
            ]  # fmt: skip
        else:
            site = None
            script = "run-tests.sh" if task.layout == "v1" else task.verifier.script.name
            argv = pristine.argv("/usr/bin/bash") + [
                "--noprofile",
                "--norc",
                f"{TESTS_DIR}/{script}",
            ]
        run = comp.run_compartment(
            sandbox, argv, env, tests_dir, vlogs, harness, timeout, stopped.netns_fd,
            channel=plan is not None, site_dir=site,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return VerifierResult(error=f"verifier could not run: {e}", seconds=time.monotonic() - t0,
                              hardened=True, notes=notes)  # fmt: skip
    finally:
        drain.stop()
        if stopped.netns_fd is not None:
            os.close(stopped.netns_fd)
    output = run.output
    error = None
    if plan is not None:
        assertions, problem = merge_records(run.records)
        (vlogs / "outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run.records))
        source, reward_value = "junit", None
        if problem is None and not assertions:
            problem = "pytest collected no tests"
    else:
        files = {n: _read_host(vlogs / n) for n in ("reward.txt", "reward.json")}
        assertions, source, reward_value, problem = outcomes_from(
            None, "", files["reward.txt"], files["reward.json"]
        )
    if run.timed_out:
        error = f"verifier timed out after {timeout:g} s"
    elif problem:
        error = f"verifier produced no outcomes (exit {run.exit_code}): {problem}"
    if error:
        tail = output.strip()[-400:]
        error += f"; output tail: {tail}" if tail else "; no output"
    return VerifierResult(
        assertions=assertions if not error else [],
        source=source,
        exit_code=run.exit_code,
        output=output[-OUTPUT_KEEP_CHARS:],
        error=error,
        reward_value=reward_value,
        seconds=time.monotonic() - t0,
        hardened=True,
        notes=notes,
    )


class _PtyDrain:
    """Reads and drops what processes left on the agent's terminal write while the verifier
    runs (a full pty would block a chatty service); the shell itself is idle then."""

    def __init__(self, shell) -> None:
        self.fd = getattr(shell, "master", -1) if shell is not None else -1
        self.done = threading.Event()
        self.thread = None
        if self.fd >= 0:
            self.thread = threading.Thread(target=self._run, name="t1-pty-drain", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if ready:
                    os.read(self.fd, 1 << 16)
            except (OSError, ValueError):
                return

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


def _read_host(path: Path) -> str | None:
    """A report file of the compartment's private /logs/verifier; a symlink is not followed."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with path.open("rb") as fh:
            return fh.read(_MAX_READ_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


# ---------------------------------------------------------------- checked against the task


def recorded_names(task: Task) -> list[str] | None:
    """The assertion names the task's pool recorded from its reference run (None: not recorded)."""
    from t1.verify.reward import pool_of

    pool = pool_of(task.path)
    if pool is None:
        return None
    try:
        data = json.loads((pool / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    me = Path(task.path).resolve()
    for t in data.get("tasks", []):
        if isinstance(t, dict) and "path" in t and (pool / t["path"]).resolve() == me:
            names = t.get("assertion_names")
            return list(names) if isinstance(names, list) else None
    return None


def check_against(result: VerifierResult, expected: list[str] | None) -> VerifierResult:
    """`result`, or a `tampered` one when its assertion names differ from `expected`.

    A tampered result keeps what was claimed in `reported`; its assertions are the expected
    names, all failed (so passed = 0, total = the task's own count): it is never accepted.
    """
    if expected is None or result.error or result.tampered or not result.assertions:
        return result
    got = sorted(a.name for a in result.assertions)
    want = sorted(expected)
    if got == want:
        return result
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    reason = (
        f"the verifier reported {len(got)} assertions, the task's reference run recorded "
        f"{len(want)}"
        + (f"; missing: {', '.join(missing[:5])}" if missing else "")
        + (f"; not in the task: {', '.join(extra[:5])}" if extra else "")
        + ("; same names, different counts" if not missing and not extra else "")
    )
    return dataclasses.replace(
        result,
        assertions=[Assertion(n, "failed") for n in want],
        reported=list(result.assertions),
        tampered=reason,
    )
