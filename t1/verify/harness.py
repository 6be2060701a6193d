"""The pytest runner of the verifier compartment: outcomes go out over a pipe, never a file.

    (inside the compartment, started by t1.verify.verifier; nothing else runs it)
    <pristine ld.so> --library-path <pristine libs> <pristine python3> -I -S \\
        /run/t1/harness/harness.py --fd N --site /run/t1/harness/site --trust /tests \\
        [--tail-path DIR]... [--no-proxy] -- PYTEST_ARGS

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
came through the pipe before the "end" line. Every record after the first carries "seq" and
"mac" (HMAC-SHA256 under a per-run key, the first record {"key": ...}, made after the agent's
process was forked off, so that process never sees it): a record the harness did not write
(t1.verify.hardened.check_signed) marks the run tampered.

The agent's code never runs here: before pytest is imported the harness forks the agent's
process (t1.verify.proxy; it closes the outcome fd first) and puts an import hook in front of
sys.meta_path (t1.verify.proxy_import) that imports every module from outside the trusted dirs
(the stdlib, this dir and its site, `--trust` dirs) THERE, behind remote handles. `--no-proxy`
(t1 bench verifier only) turns that off. Tamper telemetry (what this process can still see):
audit events for gc.get_objects/get_referrers/get_referents, sys._getframe, ctypes,
sys.settrace/setprofile and type attribute assignment caused by code from an untrusted file,
and pytest/pluggy functions or the plugin set changed between collection and the end, each
send a {"tamper": evidence} record: the host marks the run tampered.
"""

import gc
import hashlib
import hmac
import importlib.util
import json
import os
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
WATCHED = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
           "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.call_function",
           "sys.settrace", "sys.setprofile", "object.__setattr__", "object.__delattr__"}  # fmt: skip
GUARDED = ("_pytest.runner:call_and_report", "_pytest.runner:runtestprotocol",
           "_pytest.runner:pytest_runtest_makereport", "_pytest.runner:check_interactive_exception",
           "_pytest.reports:TestReport.from_item_and_call", "_pytest.reports:TestReport.__init__",
           "_pytest.reports:BaseReport.passed", "_pytest.python:pytest_pyfunc_call",
           "_pytest.python:Function.runtest", "pluggy._callers:_multicall",
           "pluggy._hooks:HookCaller.__call__", "pluggy._manager:PluginManager._hookexec",
           "pluggy._manager:PluginManager.register")  # fmt: skip


def _no_dumping() -> None:
    """prctl(PR_SET_DUMPABLE, 0): no ptrace attach, no /proc/PID/fd for same-uid processes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception as e:  # noqa: BLE001 - report and go on: the channel is still private
        sys.stderr.write(f"t1 harness: could not make the runner non-dumpable: {e}\n")


def _sibling(name: str):
    """t1.verify.<name>, shipped next to this file (compiled: its .pyc, t1.verify.bytecode),
    under a name no test module has."""
    path = os.path.join(HERE, f"{name}.pyc")
    if not os.path.isfile(path):
        path = os.path.join(HERE, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_t1_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class Trust:
    """Whether a file is pristine: the stdlib, this dir (and its site), the `--trust` dirs."""

    def __init__(self, dirs) -> None:
        paths = sysconfig.get_paths()
        roots = [paths["stdlib"], paths["platstdlib"], HERE, *dirs]
        self.roots = tuple(os.path.realpath(d).rstrip("/") + "/" for d in roots)
        self.stdlib = tuple(
            os.path.realpath(paths[k]).rstrip("/") + "/" for k in ("stdlib", "platstdlib")
        )
        self.seen: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        got = self.seen.get(path)
        if got is None:
            got = self.seen[path] = not path.startswith("/") or (
                os.path.realpath(path) + "/"
            ).startswith(self.roots)
        return got


class Reporter:
    """pytest plugin: writes each test phase's outcome to the channel as it happens."""

    def __init__(self, fd: int, trust: Trust, importer=None) -> None:
        self.fd, self.trust, self.importer = fd, trust, importer
        self.collected = 0
        self.key = os.urandom(32)  # made after the agent's process was forked off
        self.seq = 0
        self.snapshot: dict[str, object] = {}
        self.plugins: set[int] = set()
        self.flagged: set[str] = set()
        self.busy = False
        self._write({"key": self.key.hex()})

    def _write(self, record: dict) -> None:
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    def _send(self, record: dict) -> None:
        self.seq += 1
        record = {**record, "seq": self.seq}
        mac = hmac.new(self.key, json.dumps(record, sort_keys=True).encode(), hashlib.sha256)
        self._write({**record, "mac": mac.hexdigest()})

    def tamper(self, evidence: str) -> None:
        if evidence not in self.flagged and len(self.flagged) < 20:
            self.flagged.add(evidence)
            self._send({"tamper": evidence})

    # ---- telemetry

    def audit(self, event: str, args) -> None:
        if event not in WATCHED or self.busy:
            return
        self.busy = True
        try:
            frame = sys._getframe(1)
            if event.startswith("sys._getframe"):  # warnings & co. call it for everyone
                frame = (
                    frame
                    if frame is not None and not self.trust(frame.f_code.co_filename)
                    else None
                )
            while frame is not None:
                name = frame.f_code.co_filename
                if not name.startswith(self.trust.stdlib) or not self.trust(name):
                    break
                frame = frame.f_back
            if frame is not None and not self.trust(frame.f_code.co_filename):
                self.tamper(
                    f"{event} from untrusted code {frame.f_code.co_filename}:{frame.f_lineno}"
                )
        except Exception:  # noqa: BLE001 - telemetry must never break the run
            pass
        finally:
            self.busy = False

    def _functions(self) -> dict[str, object]:
        out = {}
        for spec in GUARDED:
            mod, _, attr = spec.partition(":")
            obj = sys.modules.get(mod)
            for part in attr.split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            out[spec] = getattr(
                obj, "__code__", getattr(getattr(obj, "fget", None), "__code__", obj)
            )
        for name in ("pytest_runtest_logreport", "pytest_collection_finish", "finish", "_send"):
            out[f"Reporter.{name}"] = getattr(type(self), name).__code__
        return out

    def check(self, session=None) -> None:
        """Compare pytest's functions and plugins with what they were at collection."""
        for name, was in self.snapshot.items():
            if self._functions().get(name) is not was:
                self.tamper(f"{name} was replaced during the run")
        if session is not None and self.plugins:
            now = {id(p) for p in session.config.pluginmanager.get_plugins()}
            if now - self.plugins:
                self.tamper(f"{len(now - self.plugins)} pytest plugin(s) registered during the run")

    # ---- pytest hooks

    def pytest_load_initial_conftests(self, early_config, parser, args) -> None:
        if self.importer is not None:
            self.importer.front()  # before the task's conftest.py loads, in front of pytest's hook

    def pytest_sessionstart(self, session) -> None:
        if self.importer is not None:
            self.importer.front()

    def pytest_collection_finish(self, session) -> None:
        """Every test that will run, by name: one never reported (the run was interrupted,
        e.g. by SIGINT from a process a test started) counts as failed, never as absent."""
        self.collected = len(session.items)
        self.snapshot = self._functions()
        self.plugins = {id(p) for p in session.config.pluginmanager.get_plugins()}
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

    def pytest_sessionfinish(self, session) -> None:
        self.check(session)

    def finish(self, exitstatus: int) -> None:
        self.check()
        self._send({"end": True, "exitstatus": int(exitstatus), "collected": self.collected})


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("usage: harness.py --fd N --site DIR [--trust DIR] -- PYTEST_ARGS\n")
        return 2
    cut = argv.index("--")
    opts, pytest_args = argv[:cut], argv[cut + 1 :]
    fd = int(opts[opts.index("--fd") + 1])
    os.set_inheritable(fd, False)
    _no_dumping()
    trusted = []
    for i, flag in enumerate(opts):
        if flag == "--site":
            sys.path.insert(0, opts[i + 1])
            trusted.append(opts[i + 1])
        elif flag == "--tail-path":  # the agent's site dirs, after everything of ours (no .pth run)
            sys.path.append(opts[i + 1])
        elif flag == "--trust":
            trusted.append(opts[i + 1])
    trust = Trust(trusted)
    importer = None
    if "--no-proxy" not in opts:  # fork the agent's process before anything else is imported
        wire, client = _sibling("proxy"), _sibling("proxy_client")
        hook = _sibling("proxy_import")
        sock, pid = wire.fork_child(close_fds=[fd])
        importer = hook.RemoteImporter(client.Connection(sock, pid), trust.roots)
        importer.install()
    reporter = Reporter(fd, trust, importer)
    sys.addaudithook(reporter.audit)
    # pytest's import allocates most of this process's objects and none of them become garbage:
    # no collection walks them while it runs, and later ones skip them (gc.freeze)
    gc.disable()
    import pytest

    gc.freeze()
    gc.enable()

    rc = pytest.main(pytest_args, plugins=[reporter])  # an exception: no "end" line, no outcome
    reporter.finish(int(rc))
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(
        int(rc) if 0 <= int(rc) < 256 else 1
    )  # no atexit or finalizer of anyone's after the end


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
