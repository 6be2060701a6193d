"""The pytest runner of the verifier compartment: outcomes go out over a pipe, never a file.

    (inside the compartment, started by t1.verify.verifier; nothing else runs it)
    <pristine ld.so> --library-path <pristine libs> <pristine python3> -I -S \\
        /run/t1/harness/verifier_harness.py --fd N --site /run/t1/harness/site \\
        [--tail-path DIR]... -- PYTEST_ARGS

This file imports nothing of t1: it runs under the host's own Python, seen read-only at
/run/t1/host/usr, in isolated mode (`-I`: no PYTHON* variables, no user site, no script dir
on sys.path; `-S`: no site-packages and so no .pth or sitecustomize of anyone's). pytest and
the packages the task's script asks for come from `--site`, a directory built on the host
from the provisioned wheelhouse and bound read-only. `--tail-path` dirs (the agent's own
site-packages, for verifiers that run the system Python's pytest) go to the END of sys.path,
so the tests can import what the task installed while nothing there shadows pytest; their
.pth files are not run and plugin autoload is off (PYTEST_DISABLE_PLUGIN_AUTOLOAD).

The report channel is file descriptor N, the write end of a pipe whose read end only the host
holds. It is made non-inheritable before anything else runs, so no process the tests start
gets it; the process makes itself non-dumpable, so another process of the same uid can
neither ptrace it nor open /proc/PID/fd/N (both would need CAP_SYS_PTRACE, which the
compartment does not have). One JSON line per test outcome as pytest decides it:

    {"collected": ["test_outputs.py::TestX::test_y[1]", ...]}
    {"name": "test_outputs.py::TestX::test_y[1]", "when": "call", "outcome": "passed"}
    {"end": true, "exitstatus": 0, "collected": 12}

The host merges them per test (a teardown error fails a passed test) and trusts only what
came through the pipe before the "end" line.
"""

import json
import os
import sys


def _no_dumping() -> None:
    """prctl(PR_SET_DUMPABLE, 0): no ptrace attach, no /proc/PID/fd for same-uid processes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception as e:  # noqa: BLE001 - report and go on: the channel is still private
        sys.stderr.write(f"t1 harness: could not make the runner non-dumpable: {e}\n")


class Reporter:
    """pytest plugin: writes each test phase's outcome to the channel as it happens."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.collected = 0

    def _send(self, record: dict) -> None:
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def pytest_collection_finish(self, session) -> None:
        """Every test that will run, by name: one never reported (the run was interrupted,
        e.g. by SIGINT from a process a test started) counts as failed, never as absent."""
        self.collected = len(session.items)
        self._send({"collected": [item.nodeid for item in session.items]})

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self._send(
                {"name": report.nodeid or "<collection>", "when": "collect", "outcome": "error"}
            )

    def pytest_runtest_logreport(self, report) -> None:
        if report.passed:
            outcome = "passed" if report.when == "call" else None
            if report.when == "call" and hasattr(report, "wasxfail"):
                outcome = "xpass"
        elif report.skipped:
            outcome = "xfail" if hasattr(report, "wasxfail") else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        if outcome is not None:
            self._send({"name": report.nodeid, "when": report.when, "outcome": outcome})

    def finish(self, exitstatus: int) -> None:
        self._send({"end": True, "exitstatus": int(exitstatus), "collected": self.collected})


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("usage: verifier_harness.py --fd N --site DIR -- PYTEST_ARGS\n")
        return 2
    cut = argv.index("--")
    opts, pytest_args = argv[:cut], argv[cut + 1 :]
    fd = int(opts[opts.index("--fd") + 1])
    os.set_inheritable(fd, False)
    _no_dumping()
    for i, flag in enumerate(opts):
        if flag == "--site":
            sys.path.insert(0, opts[i + 1])
        elif flag == "--tail-path":  # the agent's site dirs, after everything of ours (no .pth run)
            sys.path.append(opts[i + 1])
    import pytest

    reporter = Reporter(fd)
    rc = pytest.main(pytest_args, plugins=[reporter])  # an exception: no "end" line, no outcome
    reporter.finish(int(rc))
    os.close(fd)
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
