"""The hardened path: stop the agent, run the verifier in the compartment, read its channel.

    compartment_kind(sandbox)                            # "bwrap" | "apptainer" | None
    result = _score_hardened(task, sandbox, timeout)     # via score_in_sandbox

What it defends and how: t1.verify.verifier (the module docstring); the compartment's mounts:
t1.sandbox.compartment (bwrap) and t1.sandbox.apptainer_verify (apptainer: a second
container over the instance's overlay, read-only); the runner inside: t1.verify.harness.
Both backends share everything here: the tests' private copy, the harness dir and its
runner argv, the environment, the signed outcome channel and how it is read; only stopping
the agent and starting the compartment differ (`_compartment`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import shutil
import threading
import time
from pathlib import Path

from t1.sandbox.compartment import json_records
from t1.tasks.model import Task
from t1.verify.bytecode import harness_bytecode
from t1.verify.in_shell import TESTS_DIR
from t1.verify.outcomes import OUTCOMES, PASSING, Assertion, _nodeid_name, outcomes_from
from t1.verify.pytest_plan import _ini, harness_env, pytest_plan, tail_dirs
from t1.verify.result import _MAX_READ_BYTES, OUTPUT_KEEP_CHARS, VerifierResult

HARNESS_SOURCE = Path(__file__).with_name("harness.py")
# shipped next to the harness (it loads them by path): the agent's process and the proxy;
# the runner that runs the task's script and starts the harness for its pytest calls
HARNESS_SIBLINGS = (
    Path(__file__).with_name("proxy.py"),
    Path(__file__).with_name("proxy_client.py"),
    Path(__file__).with_name("proxy_import.py"),
    Path(__file__).with_name("script_runner.py"),
)
PROXY = True  # False: the agent's code runs inside pytest (`t1 bench verifier` only)
PYTEST_INI = (
    "[pytest]\n"  # our own: a pytest.ini / pyproject.toml / setup.cfg planted anywhere is not read
)


def check_signed(records: list[dict], bad_lines: int = 0) -> tuple[list[dict], str | None]:
    """The records the harness wrote (first {"key"}, then each with its seq and HMAC), without
    key/seq/mac; and the evidence (None: none) of anything else in the channel or of the
    harness's own tamper telemetry ({"tamper": ...} records)."""
    evidence: list[str] = []
    if bad_lines:
        evidence.append(f"{bad_lines} line(s) in the outcome channel that are not records")
    if not records:
        return [], "; ".join(evidence) or None
    key = records[0].get("key") if isinstance(records[0].get("key"), str) else None
    if key is None:
        return [], "the outcome channel does not start with the harness's key record"
    try:
        secret = bytes.fromhex(key)
    except ValueError:
        return [], "the outcome channel's key record is malformed"
    out: list[dict] = []
    seq = 0
    for rec in records[1:]:
        body = {k: v for k, v in rec.items() if k != "mac"}
        mac = hmac.new(
            secret, json.dumps(body, sort_keys=True).encode(), hashlib.sha256
        ).hexdigest()
        if not isinstance(rec.get("mac"), str) or not hmac.compare_digest(mac, rec["mac"]):
            evidence.append(f"a record the harness did not write: {json.dumps(rec)[:160]}")
            continue
        if body.get("seq") != seq + 1:
            evidence.append(f"a replayed or reordered record (seq {body.get('seq')} after {seq})")
            continue
        seq += 1
        body.pop("seq")
        if "tamper" in body:
            evidence.append(f"harness telemetry: {str(body['tamper'])[:300]}")
            continue
        out.append(body)
    return out, "; ".join(dict.fromkeys(evidence))[:2000] or None


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


def runner_outcomes(
    records: list[dict], bad_lines: int = 0
) -> tuple[list[Assertion], str | None, str | None, int]:
    """(assertions, tamper evidence, problem, runs) from the runner's channel
    (t1.verify.script_runner): each harness run's lines checked (`check_signed`) and merged
    (`merge_records`) on their own, then across runs, a test failing in any run failing."""
    evidence = [f"{bad_lines} line(s) in the channel that are not records"] if bad_lines else []
    lines: dict[int, list[str]] = {}
    end = None
    problems: list[str] = []
    for rec in records:
        if rec.get("end") is True and "run" not in rec:
            end = rec
            break
        k = rec.get("run")
        if not isinstance(k, int) or isinstance(k, bool):
            evidence.append(f"a channel record that is not the runner's: {json.dumps(rec)[:160]}")
            continue
        if "error" in rec:
            problems.append(str(rec["error"])[:300])
        lines.setdefault(k, []).append(str(rec.get("line", "")))
    merged: dict[str, str] = {}
    for k in sorted(lines):
        recs, bad = json_records(lines[k])
        signed, ev = check_signed(recs, bad)
        if ev:
            evidence.append(f"pytest run {k}: {ev}")
        got, problem = merge_records(signed)
        if problem:
            problems.append(f"pytest run {k}: {problem}")
        for a in got:
            prev = merged.get(a.name)
            if prev is None or (prev in PASSING and a.outcome not in PASSING):
                merged[a.name] = a.outcome
    if end is None:
        problems.append("the verifier's runner ended without its end record")
    elif not lines:
        problems.append(
            f"the verifier script never ran pytest (exit {end.get('script_exit')}): no outcomes, "
            "so none of the task's tests passed"
        )
    out = [Assertion(n, o) for n, o in merged.items()]
    tampered = "; ".join(dict.fromkeys(evidence))[:2000] or None
    return out, tampered, "; ".join(problems) or None, len(lines)


def compartment_kind(sandbox) -> str | None:
    """How `sandbox` is verified: "bwrap" (t1.sandbox.compartment), "apptainer" (an instance
    over a host-dir overlay: t1.sandbox.apptainer_verify), None (its own shell: not hardened)."""
    if getattr(sandbox, "plan", None) is not None and hasattr(sandbox, "cgroup"):
        return "bwrap"
    from t1.sandbox.apptainer import ApptainerSandbox

    if isinstance(sandbox, ApptainerSandbox) and None not in (
        sandbox.overlay_dir, sandbox.image, sandbox.root
    ):  # fmt: skip
        return "apptainer"
    return None


def _compartment(sandbox):
    """(what stopping the agent did, the verifier's host dir, the compartment's runner) for
    the sandbox's backend; the runners share run_compartment's call shape."""
    if compartment_kind(sandbox) == "apptainer":
        from t1.sandbox.apptainer_verify import run_apptainer_verify, stop_instance_agent

        return stop_instance_agent(sandbox), sandbox.root / "verifier", run_apptainer_verify
    from t1.sandbox.agent_stop import stop_agent
    from t1.sandbox.compartment import run_compartment

    shell = sandbox.shell
    launcher = shell.proc.pid if shell is not None and shell.proc is not None else None
    return stop_agent(sandbox.cgroup, launcher), sandbox.plan.root / "verifier", run_compartment


def _score_hardened(task: Task, sandbox, timeout: float | None) -> VerifierResult:
    """Stop the agent, then run the verifier in the backend's compartment (module docstring)."""
    from t1.sandbox.compartment import HARNESS_INSIDE, TMP_INSIDE
    from t1.sandbox.hostview import Pristine
    from t1.sandbox.provision import locate
    from t1.verify.script_plan import prepare_runner, runner_argv

    t0 = time.monotonic()
    timeout = timeout or task.verifier_timeout_s
    kind = f"compartment: {compartment_kind(sandbox)}"
    try:
        stopped, vdir, run_in = _compartment(sandbox)
    except Exception as e:  # noqa: BLE001 - the verifier never raises into the run loop
        return VerifierResult(error=f"could not stop the agent's processes: {e}", hardened=True,
                              notes=[kind])  # fmt: skip
    drain = _PtyDrain(sandbox.shell)  # services may still write to the agent's terminal
    notes = [f"agent processes killed: {stopped.killed}", kind]
    if stopped.services:
        notes.append(
            "services left running: "
            + "; ".join(f"{p} {c[:80]}" for p, c in sorted(stopped.services.items()))
        )
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
        pycs = harness_bytecode([HARNESS_SOURCE, *HARNESS_SIBLINGS], HARNESS_INSIDE)
        for f in (HARNESS_SOURCE, *HARNESS_SIBLINGS):
            shutil.copy2(f, harness / f.name)
            if pycs is not None:  # started as NAME.pyc: no compile per start (t1.verify.bytecode)
                shutil.copyfile(pycs[f.name], harness / f"{f.stem}.pyc")
        (harness / "pytest.ini").write_text(PYTEST_INI)
        pristine = Pristine.detect()
        env = harness_env(task, getattr(sandbox, "base_env", None))
        prov = locate(sandbox.spec.provision)
        if plan is not None:
            targets, specs = plan
            if prov is None:
                raise RuntimeError(
                    "no provision cache (run `t1 provision`): the harness needs pytest"
                )
            site = prepare_runner(harness, task, tests_dir, pristine, prov, specs,
                                  _ini(tests_dir, HARNESS_INSIDE), tail_dirs(), PROXY,
                                  HARNESS_INSIDE, TMP_INSIDE, fallback=targets,
                                  bytecode=pycs is not None)  # fmt: skip
            argv = runner_argv(pristine, HARNESS_INSIDE, bytecode=pycs is not None)
        else:
            site = None
            script = "run-tests.sh" if task.layout == "v1" else task.verifier.script.name
            argv = pristine.argv("/usr/bin/bash") + [
                "--noprofile",
                "--norc",
                f"{TESTS_DIR}/{script}",
            ]
        run = run_in(
            sandbox, argv, env, tests_dir, vlogs, harness, timeout, stopped.netns_fd,
            channel=plan is not None, site_dir=site, pidns_fd=stopped.pidns_fd,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return VerifierResult(error=f"verifier could not run: {e}", seconds=time.monotonic() - t0,
                              hardened=True, notes=notes)  # fmt: skip
    finally:
        drain.stop()
        for fd in (stopped.netns_fd, stopped.pidns_fd):
            if fd is not None:
                os.close(fd)
    output = run.output
    error = tampered = None
    if plan is not None:
        assertions, tampered, problem, runs = runner_outcomes(run.records, run.bad_lines)
        notes.append(f"pytest runs of the script: {runs}")
        if any(r.get("end") is True and r.get("fallback") for r in run.records):
            notes.append(
                "the script called pytest in no form the shims intercept (e.g. an interpreter "
                "by absolute path): the harness ran the test files it names after the script"
            )
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
    reported: list[Assertion] = []
    if tampered and not error:  # scored as all failed; what it claimed is kept
        reported = assertions
        assertions = [Assertion(a.name, "failed") for a in assertions]
    elif tampered:
        notes.append(f"tampered: {tampered}")
    return VerifierResult(
        assertions=assertions if not error else [],
        tampered=tampered,
        reported=reported,
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
    runs (a full pty would block a chatty service); the shell itself is idle then. stop()
    wakes the reader through a pipe, so a verifier run ends when its work does (a polling
    timeout rounded every run up to its next period)."""

    def __init__(self, shell) -> None:
        self.fd = getattr(shell, "master", -1) if shell is not None else -1
        self.thread = None
        self.wake = (-1, -1)
        if self.fd >= 0:
            self.wake = os.pipe()
            self.thread = threading.Thread(target=self._run, name="t1-pty-drain", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.fd, self.wake[0]], [], [])
                if self.wake[0] in ready:
                    return
                if self.fd in ready and not os.read(self.fd, 1 << 16):
                    return  # end of file: nothing can write there any more
            except (OSError, ValueError):
                return

    def stop(self) -> None:
        if self.thread is None:
            return
        try:
            os.write(self.wake[1], b"x")
        except OSError:
            pass
        self.thread.join(timeout=5)
        for fd in self.wake:
            try:
                os.close(fd)
            except OSError:
                pass
        self.thread = None


def _read_host(path: Path) -> str | None:
    """A report file of the compartment's private /logs/verifier; a symlink is not followed."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with path.open("rb") as fh:
            return fh.read(_MAX_READ_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
