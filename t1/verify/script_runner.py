"""The verifier compartment's first process: runs the task's script; pytest calls become harness runs.

    (inside the compartment only; started by t1.verify.hardened, nothing else runs it)
    <exec-only ld.so> --library-path LIBS <host python3> -I -S \\
        /run/t1/harness/script_runner.py --fd N --config /run/t1/harness/runner.json
    (the shims in /run/t1/harness/bin and the script's bash functions run)
    <host ld.so> ... <host python3> -I -S /run/t1/harness/script_runner.py call TOOL ARGS...

This file imports nothing of t1. The runner holds the outcome channel (fd N, made
non-inheritable; the process is non-dumpable from its exec on: its loader is a copy the
compartment can execute but not read, and prctl), opens a control socket, and runs the task's
script (v1 run-tests.sh, v2 tests/test.sh) under the host's bash, as written: its cp, export,
cd, installs (served by the offline cache), the services it starts. `pytest`, `py.test`,
`python`/`python3` (`-m pytest`), `uv` (`uv run [python -m] pytest`) and `uvx` (`uvx ...
pytest`) are bash functions of that bash (BASH_ENV, exported) and shims first on PATH; each
calls this file as `call`: a pytest invocation becomes a request over the socket (with the
caller's stdin/out/err, cwd and environment), anything else runs the real tool next on PATH.

For each request the runner checks the caller descends from the script's bash (SO_PEERCRED
and the ppid chain; a process the tests started never does), keeps the pytest options it
knows (-k, -m, -x, -q, -v, -r.., --tb, --maxfail, --deselect, --ignore, -W, -p no:X; report
and plugin options are dropped with a note) and the test files under /tests (a copy of one,
e.g. `cp /tests/test_x.py /app && pytest /app/test_x.py`, stands for it; other files are
dropped; none named: /tests), and starts the harness (t1.verify.harness) itself, with a pipe
of its own as the outcome fd, under the interpreter asked for (`-p`/`--python X.Y`: the
provisioned /opt/t1/python/X.Y when the host built a site for it, else the host's python3).
Every line the harness writes is forwarded on the channel as {"run": K, "line": ...}; the
runner's own last record is {"end": true, "runs": K, "script_exit": RC}. The harness's exit
status goes back to the caller, so the script sees pytest's.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("pytest", "py.test", "python", "python3", "uv", "uvx")
FLAGS = {"-q", "--quiet", "-v", "--verbose", "-vv", "-vvv", "-x", "--exitfirst", "-s", "-l",
         "--showlocals", "--strict-markers", "--no-header", "--no-summary", "--runxfail",
         "--disable-warnings", "--disable-pytest-warnings", "-ra", "-rA", "-rf", "-rs"}  # fmt: skip
VALUED = {"-k", "-m", "--maxfail", "--tb", "--capture", "--color", "--durations", "--deselect",
          "--ignore", "--ignore-glob", "-W", "--pythonwarnings", "-r", "--import-mode"}  # fmt: skip
DROP_VALUED = {"--ctrf", "--junitxml", "--junit-xml", "--json-report-file", "--html", "--cov",
               "--cov-report", "--timeout", "-n", "--numprocesses", "--dist", "--reruns", "-c",
               "--config-file", "--rootdir", "--confcutdir", "-o", "--override-ini", "--basetemp",
               "--log-file", "--log-level", "--junit-prefix", "--result-log", "-p"}  # fmt: skip
PY_VALUED = {"-W", "-X", "-c"}
UV_RUN_VALUED = {"--with", "-w", "-p", "--python", "--project", "--directory", "--group",
                 "--extra", "--with-requirements", "--env-file", "--from", "--index",
                 "--find-links", "-f", "--index-url", "--extra-index-url", "--cache-dir"}  # fmt: skip


# ---- recognising a pytest invocation (the client and the runner both parse; the runner decides)


def _python_m_pytest(args: list[str]):
    """pytest args of `python [opts] -m pytest ARGS`, else None."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            if i + 1 < len(args) and args[i + 1] in ("pytest", "py.test"):
                return args[i + 2 :]
            return None
        if a.startswith("-m") and len(a) > 2:
            return args[i + 1 :] if a[2:] in ("pytest", "py.test") else None
        if not a.startswith("-") or a == "-":
            return None  # a script or stdin
        i += 2 if a in PY_VALUED else 1
    return None


def _uv_opts(args: list[str], valued: set) -> tuple[dict, list[str]]:
    """(options seen, the rest) of `uv run`/`uvx` arguments."""
    opts: dict = {"python": None, "with": []}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            break
        name, eq, val = a.partition("=")
        if not eq and name in valued:
            val = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        if name in ("-p", "--python"):
            opts["python"] = val
        elif name in ("-w", "--with"):
            opts["with"].append(val)
        elif name == "--from":
            opts["from"] = val
        i += 1
    return opts, args[i:]


def parse(tool: str, args: list[str]):
    """{"form", "args", "python"} when this call runs pytest, else None (run the real tool)."""
    if tool in ("pytest", "py.test"):
        return {"form": "pytest", "args": args, "python": None}
    if tool in ("python", "python3") or tool.startswith("python3."):
        rest = _python_m_pytest(args)
        ver = tool[6:] if tool.startswith("python3.") else None
        return None if rest is None else {"form": "python-m", "args": rest, "python": ver}
    if tool == "uv":
        if args[:1] == ["run"]:
            opts, rest = _uv_opts(args[1:], UV_RUN_VALUED)
        elif args[:2] == ["tool", "run"]:
            opts, rest = _uv_opts(args[2:], UV_RUN_VALUED)
            rest = ["pytest", *rest[1:]] if rest[:1] and _is_pytest(rest[0], opts) else rest
        else:
            return None
        if rest[:1] and rest[0] in ("pytest", "py.test"):
            return {"form": "uv", "args": rest[1:], "python": opts["python"]}
        if rest[:1] and rest[0].startswith("python"):
            inner = _python_m_pytest(rest[1:])
            if inner is not None:
                return {"form": "uv", "args": inner, "python": opts["python"]}
        return None
    if tool == "uvx":
        opts, rest = _uv_opts(args, UV_RUN_VALUED)
        if rest and _is_pytest(rest[0], opts):
            return {"form": "uv", "args": rest[1:], "python": opts["python"]}
    return None


def _is_pytest(word: str, opts: dict) -> bool:
    name = word.split("@", 1)[0].split("==", 1)[0]
    return name in ("pytest", "py.test") and (
        "from" not in opts or opts["from"].split("=")[0].split("@")[0] == "pytest"
    )


# ---- the client (a shim or a bash function runs it)


def call(tool: str, args: list[str]) -> int:
    req = parse(tool, args)
    if req is None:
        return _passthrough(tool, args)
    import json
    import socket

    path = os.environ.get("T1_CTL", "")
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        body = json.dumps({"tool": tool, "args": args, "cwd": os.getcwd(),
                           "env": dict(os.environ)}).encode()  # fmt: skip
        socket.send_fds(sock, [len(body).to_bytes(8, "big") + body], [0, 1, 2])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return int(json.loads(reply or b'{"rc": 3}').get("rc", 3))
    except (OSError, ValueError) as e:
        sys.stderr.write(f"t1: {tool}: the verifier's pytest is not reachable here ({e})\n")
        return 3


def _passthrough(tool: str, args: list[str]) -> int:
    shims = os.path.join(HERE, "bin")
    for d in os.environ.get("PATH", "").split(":"):
        if not d or os.path.realpath(d) == os.path.realpath(shims):
            continue
        exe = os.path.join(d, tool)
        if os.access(exe, os.X_OK) and not os.path.isdir(exe):
            env = {k: v for k, v in os.environ.items() if not k.startswith("BASH_FUNC_")}
            os.execve(exe, [tool, *args], env)
    sys.stderr.write(f"{tool}: command not found\n")
    return 127


if __name__ == "__main__" and sys.argv[1:2] == ["call"] and len(sys.argv) >= 3:
    # The one entry of a shim's call (twice per verifier run of a generated task: its `python3
    # -c 'import pytest'` probe and its `python3 -m pytest`); it needs nothing below: importing
    # the runner's modules cost each call about 20 ms of CPU, three times the interpreter's own
    # start. main() is the runner.
    sys.exit(call(sys.argv[2], sys.argv[3:]))

import ctypes  # noqa: E402 - the runner's own modules, after the shims' fast path above
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402


def _no_dumping() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"t1 runner: could not make itself non-dumpable: {e}\n")


# ---- the runner


class Runner:
    def __init__(self, fd: int, cfg: dict) -> None:
        self.fd, self.cfg = fd, cfg
        self.lock = threading.Lock()
        self.runs = 0
        self.harness_pids: set[int] = set()
        self.script_pid = -1
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()

    def emit(self, rec: dict) -> None:
        data = (json.dumps(rec) + "\n").encode()
        with self.lock:
            while data:
                data = data[os.write(self.fd, data) :]

    def _ancestry_ok(self, pid: int) -> bool:
        for _ in range(4096):
            if pid == self.script_pid:
                return True
            if pid in self.harness_pids or pid <= 1 or pid == os.getpid():
                return False
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    pid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return False
        return False

    def chain(self, pid: int) -> list[int]:
        out = [pid]
        while pid > 1 and len(out) < 64:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    pid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
            out.append(pid)
        return out

    def serve(self, srv: socket.socket) -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        rc = 3
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            peer = int.from_bytes(creds[:4], sys.byteorder)
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            size = int.from_bytes(msg[:8], "big")
            body = msg[8:]
            while len(body) < size:
                chunk = conn.recv(size - len(body))
                if not chunk:
                    break
                body += chunk
            req = json.loads(body)
            self.started.wait(10)
            if len(fds) != 3 or not self._ancestry_ok(peer):
                sys.stderr.write(f"t1 runner: refused a pytest request from pid {peer} "
                                 f"(not a process of the script {self.script_pid}: {self.chain(peer)})\n")  # fmt: skip
            else:
                rc = self.run_harness(req, fds)
        except Exception as e:  # noqa: BLE001 - one bad request must not end the runner
            sys.stderr.write(f"t1 runner: bad request: {e}\n")
        finally:
            for f in fds:
                os.close(f)
            try:
                conn.sendall((json.dumps({"rc": rc}) + "\n").encode())
            except OSError:
                pass
            conn.close()

    def run_harness(self, req: dict, fds: list[int]) -> int:
        p = parse(str(req["tool"]), [str(a) for a in req["args"]])
        if p is None:
            return 3
        cwd = str(req.get("cwd") or "/")
        args, notes = pytest_args(p["args"], cwd, self.cfg["tests"])
        err = os.fdopen(os.dup(fds[2]), "w")
        for n in notes:
            err.write(f"t1: {n}\n")
        err.flush()
        err.close()
        if args is None:
            return 4
        cfg = self.cfg
        py, site = cfg["python"], cfg["site"]
        ver = p.get("python")
        if ver and ver in cfg.get("pythons", {}):
            py, site = cfg["pythons"][ver]["python"], cfg["pythons"][ver]["site"]
        tail = cfg.get("tail", []) if p["form"] in ("pytest", "python-m") else []
        r_fd, w_fd = os.pipe()
        argv = [*cfg["prefix"], py, "-I", "-S", cfg["harness"], "--fd", str(w_fd),
                "--site", site, "--trust", cfg["tests"],
                *[x for d in tail for x in ("--tail-path", d)],
                *([] if cfg.get("proxy", True) else ["--no-proxy"]), "--",
                *_default_tb(args, cfg["ini"]), *args,
                "-c", cfg["ini"], "--rootdir", cfg["tests"], "--confcutdir", cfg["tests"],
                "-p", "no:cacheprovider", "-rA"]  # fmt: skip
        env = {k: v for k, v in req.get("env", {}).items()
               if not k.startswith(("BASH_FUNC_", "LD_", "PYTEST_", "PYTHON"))
               and k not in ("BASH_ENV", "ENV", "T1_CTL")}  # fmt: skip
        shims = os.path.join(HERE, "bin")
        env["PATH"] = ":".join(d for d in env.get("PATH", "").split(":") if d and d != shims)
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        with self.lock:
            self.runs += 1
            k = self.runs
        try:
            proc = subprocess.Popen(argv, stdin=fds[0], stdout=fds[1], stderr=fds[2], cwd=cwd,
                                    env=env, pass_fds=[w_fd], close_fds=True)  # fmt: skip
        except OSError as e:
            os.close(r_fd)
            os.close(w_fd)
            self.emit({"run": k, "line": "", "error": f"could not start the harness: {e}"})
            return 3
        self.harness_pids.add(proc.pid)
        os.close(w_fd)
        buf = b""
        with os.fdopen(r_fd, "rb") as fh:
            for line in fh:
                buf += line
                if line.endswith(b"\n"):
                    self.emit({"run": k, "line": buf.decode("utf-8", "replace").rstrip("\n")})
                    buf = b""
        if buf:
            self.emit({"run": k, "line": buf.decode("utf-8", "replace")})
        return proc.wait()


def _default_tb(args: list[str], ini: str) -> list[str]:
    """`--tb=native` unless the script or the task's ini chooses a traceback style: pytest's
    default style parses each failing test's source (an AST walk per traceback entry), a third of
    a harness run whose tests fail, as every test does in a no-op check; native tracebacks carry
    the same lines. Only the printed report changes, never an outcome."""
    if any(a == "--tb" or a.startswith("--tb=") for a in args):
        return []
    try:
        with open(ini, encoding="utf-8", errors="replace") as fh:
            if "--tb" in fh.read():
                return []
    except OSError:
        pass
    return ["--tb=native"]


def pytest_args(args: list[str], cwd: str, tests: str) -> tuple[list[str] | None, list[str]]:
    """(args the harness passes to pytest, notes): known options kept, files under /tests."""
    out: list[str] = []
    targets: list[str] = []
    notes: list[str] = []
    named = False
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, _ = a.partition("=")
        if a == "--":
            i += 1
            continue
        if a.startswith("-") and a != "-":
            if a in FLAGS or (a.startswith("-r") and len(a) > 2) or (a in VALUED and eq == ""):
                take = 2 if a in VALUED else 1
                out += args[i : i + take]
                i += take
                continue
            if eq and name in VALUED:
                out.append(a)
            elif name == "-p" and not eq and i + 1 < len(args) and args[i + 1].startswith("no:"):
                out += ["-p", args[i + 1]]
                i += 1
            elif name in DROP_VALUED and not eq:
                notes.append(f"pytest option {a} {args[i + 1] if i + 1 < len(args) else ''} "
                             "is not passed to the verifier's pytest")  # fmt: skip
                i += 1
            elif a[:2] in ("-k", "-m", "-W") and len(a) > 2:
                out += [a[:2], a[2:]]
            else:
                notes.append(f"pytest option {a} is not passed to the verifier's pytest")
            i += 1
            continue
        named = True
        t = _test_target(a, cwd, tests)
        if t is None:
            notes.append(f"{a}: not a file of {tests}; not run")
        elif t not in targets:
            targets.append(t)
        i += 1
    if named and not targets:
        return None, [*notes, "no test file under /tests named: nothing run"]
    return [*(targets or [tests]), *out], notes


def _test_target(arg: str, cwd: str, tests: str) -> str | None:
    path, sep, rest = arg.partition("::")
    full = os.path.realpath(os.path.join(cwd, path))
    root = os.path.realpath(tests)
    if full == root or full.startswith(root + "/"):
        return tests + full[len(root) :] + sep + rest if os.path.exists(full) else None
    if os.path.isfile(full):  # a copy of one of the task's test files stands for it
        try:
            with open(full, "rb") as fh:
                data = fh.read(1 << 22)
        except OSError:
            return None
        for dirpath, _, files in os.walk(root):
            if os.path.basename(full) in files:
                cand = os.path.join(dirpath, os.path.basename(full))
                with open(cand, "rb") as fh:
                    if fh.read(1 << 22) == data:
                        return cand + sep + rest
    return None


def main(argv: list[str]) -> int:
    fd = int(argv[argv.index("--fd") + 1])
    os.set_inheritable(fd, False)
    _no_dumping()
    with open(argv[argv.index("--config") + 1]) as fh:
        cfg = json.load(fh)
    runner = Runner(fd, cfg)
    ctl_dir = os.path.join(cfg["tmp"], f"t1-ctl-{os.urandom(6).hex()}")
    os.mkdir(ctl_dir, 0o700)
    ctl = os.path.join(ctl_dir, "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(ctl)
    srv.listen(16)
    threading.Thread(target=runner.serve, args=(srv,), daemon=True).start()
    env = dict(os.environ)
    env.update(T1_CTL=ctl, BASH_ENV=os.path.join(HERE, "prelude.sh"))
    env["PATH"] = os.path.join(HERE, "bin") + ":" + env.get("PATH", "")
    proc = subprocess.Popen([*cfg["bash"], cfg["script"]], env=env, close_fds=True,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    runner.script_pid = proc.pid
    runner.started.set()
    rc = proc.wait()
    srv.close()  # no request after the script ended
    for t in list(runner.threads):
        t.join()
    fallback = runner.runs == 0 and bool(cfg.get("fallback"))
    if fallback:  # the script ran pytest in a form no shim sees (an interpreter by absolute path)
        req = {"tool": "pytest", "args": list(cfg["fallback"]), "cwd": cfg["tests"],
               "env": {k: v for k, v in env.items() if k not in ("T1_CTL", "BASH_ENV")}}  # fmt: skip
        with open(os.devnull, "rb") as devnull:
            runner.run_harness(req, [devnull.fileno(), 1, 2])
    runner.emit({"end": True, "runs": runner.runs, "script_exit": rc, "fallback": fallback})
    os.close(fd)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
