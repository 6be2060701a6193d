"""Every isolation claim of the bwrap sandbox, checked against the real bubblewrap.

.venv/bin/pytest tests/sandbox/test_isolation.py -m integration -q
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from pathlib import Path

import pytest
from shared_fixtures import requires_root_bwrap

from t1.sandbox import Limits, SandboxError, SandboxSpec, open_sandbox
from t1.sandbox.runtime import runtime_root

pytestmark = [pytest.mark.integration, requires_root_bwrap]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def sb(tmp_path):
    with open_sandbox(SandboxSpec(host_workdir=tmp_path / "work", logs_dir=tmp_path / "logs")) as s:
        yield s


def test_capabilities_dropped_and_no_new_privs(sb):
    out = sb.exec("grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status").output
    assert "CapEff:\t0000000000000000" in out
    assert "CapPrm:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    r = sb.exec("mount -t tmpfs none /mnt 2>&1; echo rc=$?")
    assert "rc=0" not in r.output


def test_no_network_not_even_host_loopback():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    hits: list[int] = []

    def accept():
        srv.settimeout(8)
        try:
            conn, _ = srv.accept()
            hits.append(1)
            conn.close()
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    # the host itself can reach the server (the test's own check that it listens)
    with open_sandbox(SandboxSpec()) as s:
        r = s.exec(
            'python3 -c "import socket; s=socket.socket(); s.settimeout(3); '
            f"s.connect(('127.0.0.1', {port})); print('CONNECTED')\" 2>&1; "
            f"curl -s -m 3 http://127.0.0.1:{port}/ ; echo curl=$?; "
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" 2>&1 | tail -1; "
            "cat /proc/net/dev | tail -n +3 | cut -d: -f1",
            timeout=30,
        )
    assert "CONNECTED" not in r.output
    assert "curl=0" not in r.output
    assert [x.strip() for x in r.output.strip().splitlines()[-1:]] == ["lo"]  # only its own lo
    c = socket.create_connection(("127.0.0.1", port), timeout=3)
    c.close()
    t.join(10)
    srv.close()
    assert hits == [1]  # exactly the host's own connection got through


def test_no_writes_outside_workdir_and_tmp(tmp_path):
    watched = [
        Path("/etc/passwd"),
        Path("/etc/hostname"),
        Path("/usr/bin/bash"),
        Path("/etc/hosts"),
    ]
    before = {p: sha(p) for p in watched}
    mtimes = {
        d: d.stat().st_mtime_ns
        for d in (Path("/usr"), Path("/etc"), Path("/root"), Path("/var/lib"))
    }
    work = tmp_path / "work"
    with open_sandbox(SandboxSpec(host_workdir=work)) as s:
        r = s.exec(
            "echo pwned >> /etc/passwd; echo x > /usr/t1-pwned; rm -f /usr/bin/bash.bak; "
            "echo x > /root/t1-pwned; echo x > /etc/hosts; echo x > /var/lib/t1-pwned; "
            "mkdir -p /work/t1-pwned; echo ok > /app/inside; echo ok > /tmp/inside; "
            "cat /usr/t1-pwned /root/t1-pwned; tail -1 /etc/passwd"
        )
        assert r.output.count("x") >= 2  # the writes succeeded inside (copy-on-write)
    assert {p: sha(p) for p in watched} == before
    assert {d: d.stat().st_mtime_ns for d in mtimes} == mtimes
    for p in ("/usr/t1-pwned", "/root/t1-pwned", "/var/lib/t1-pwned", "/work/t1-pwned"):
        assert not Path(p).exists(), p
    assert (work / "inside").read_text() == "ok\n"  # the workdir is the one writable bind


@pytest.fixture(scope="module")
def host_secrets():
    """A root-only 0600 file and a 0700 dir under /etc (removed afterwards)."""
    tag = os.urandom(8).hex()
    f = Path(f"/etc/t1-test-secret-{tag}")
    d = Path(f"/etc/t1-test-private-{tag}")
    f.write_text(f"TOPSECRET-{tag}\n")
    f.chmod(0o600)
    d.mkdir(mode=0o700)
    (d / "key").write_text(f"DIRSECRET-{tag}\n")
    (d / "key").chmod(0o644)
    yield f, d, tag
    f.unlink()
    (d / "key").unlink()
    d.rmdir()


def test_host_secrets_unreadable(host_secrets):
    f, d, tag = host_secrets
    shadow_hashes = [
        ln.split(":")[1] for ln in Path("/etc/shadow").read_text().splitlines() if ln.count(":") > 2
    ]
    with open_sandbox(SandboxSpec()) as s:
        r = s.exec(
            f"cat {f} {d}/key /etc/shadow /etc/gshadow 2>&1; ls -la {d}; ls /etc/ssl/private 2>&1"
        )
    assert f"TOPSECRET-{tag}" not in r.output
    assert f"DIRSECRET-{tag}" not in r.output
    for h in shadow_hashes:
        if len(h) > 2:  # real password hashes never show
            assert h not in r.output
    assert "root:*:" in r.output  # a sanitized shadow stays usable (useradd works)


def test_shadow_files_synthesized_locked_and_user_tools_work(tmp_path):
    """/etc/shadow and /etc/gshadow are synthesized (every user/group locked, root:shadow 0640),
    so shadow-utils work in the copy-on-write /etc; the host's /etc never changes."""
    before = {f: sha(Path(f)) for f in ("/etc/passwd", "/etc/group")}
    with open_sandbox(SandboxSpec(host_workdir=tmp_path / "w")) as s:
        meta = s.exec("stat -c '%U:%G %a' /etc/shadow /etc/gshadow").output.split()
        r = s.exec(
            "groupadd t1grp && useradd -m -g t1grp t1user && passwd -l t1user >/dev/null && "
            "echo OK; grep -c '' /etc/passwd; grep -c '' /etc/shadow; "
            "cut -d: -f2 /etc/shadow /etc/gshadow | sort -u | tr '\\n' ' '; echo; "
            "grep '^t1user:' /etc/shadow; grep '^t1grp:' /etc/gshadow"
        ).output.splitlines()
    assert meta == ["root:shadow", "640"] * 2
    assert r[0] == "OK", r
    assert r[1] == r[2]  # one shadow row per user
    assert set(r[3].split()) <= {"*", "!"}, r[3]  # nothing but locked passwords
    assert r[4].startswith("t1user:!") and r[5].startswith("t1grp:")
    assert {f: sha(Path(f)) for f in before} == before


def test_home_and_data_dirs_invisible(tmp_path):
    marker = Path("/root") / f".t1-visible-{os.urandom(4).hex()}"
    marker.write_text("x")
    try:
        with open_sandbox(SandboxSpec()) as s:
            r = s.exec(
                f"ls -A /root /home; test -e {marker} && echo SEEN; "
                "ls /work /srv /mnt /opt/pypi /var/lib/mysql /var/lib/munge /var/log 2>&1; ls /tmp | wc -l"
            )
    finally:
        marker.unlink()
    assert "SEEN" not in r.output
    assert "cloudsdk" not in r.output
    assert "mysql" not in r.output.replace("/var/lib/mysql", "")
    assert r.output.strip().endswith("0")  # /tmp starts empty


def test_host_processes_invisible(sb):
    r = sb.exec("ps -eo pid,comm --no-headers; ls /proc | grep -c '^[0-9]'")
    pids = [int(line.split()[0]) for line in r.output.splitlines()[:-1]]
    assert max(pids) < 100 and len(pids) < 10
    assert os.getpid() not in pids or os.getpid() < 100
    assert "pytest" not in r.output and "python" not in r.output


def test_fork_bomb_is_contained(tmp_path):
    limits = Limits(max_processes=64, memory_mb=512)
    with open_sandbox(SandboxSpec(limits=limits)) as s:
        cg = s.cgroup
        r = s.exec("bomb() { bomb | bomb & }; bomb; sleep 2; echo done", timeout=6)
        peak = (cg.dirs["pids"] / "pids.peak").read_text().strip() if "pids" in cg.dirs else "0"
        assert int(peak) <= 64
        del r
    assert not cg.dirs  # removed after stop
    # the host is fine: we can still fork
    assert os.system("true") == 0


def test_memory_hog_is_killed_host_fine():
    with open_sandbox(SandboxSpec(limits=Limits(memory_mb=128))) as s:
        r = s.exec(
            "python3 -c \"a = bytearray(512 * 1024 * 1024); a[::4096] = b'x' * len(a[::4096]); print('SURVIVED')\"",
            timeout=60,
        )
        assert "SURVIVED" not in r.output
        assert r.exit_code != 0
        assert s.exec("echo still-here").output == "still-here\n"


def test_endless_output_is_capped():
    with open_sandbox(SandboxSpec(output_cap_bytes=8192)) as s:
        r = s.exec("yes", timeout=2)
        assert r.timed_out and r.exit_code == 124 and r.truncated
        assert "bytes cut ...]" in r.output
        assert len(r.output) < 8192 + 200
        assert s.exec("echo ok").output == "ok\n"


def test_hung_command_is_interrupted_and_shell_usable():
    with open_sandbox(SandboxSpec()) as s:
        s.exec("cd /tmp && export KEEP=yes")
        r = s.exec("sleep 1000", timeout=1)
        assert r.timed_out and r.exit_code == 124
        assert s.exec("echo $KEEP; pwd").output == "yes\n/tmp\n"


def test_cpu_limit_and_wall_time():
    with open_sandbox(SandboxSpec(limits=Limits(cpus=0.5, wall_s=3))) as s:
        if "cpu" in s.cgroup.dirs:
            assert (s.cgroup.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        r = s.exec("sleep 10", timeout=60)
        assert r.timed_out  # the wall time caps the command timeout
        with pytest.raises(SandboxError, match="wall time"):
            s.exec("echo late")


def test_file_size_limit():
    with open_sandbox(SandboxSpec(limits=Limits(max_file_mb=1))) as s:
        r = s.exec("head -c 5000000 /dev/zero > /tmp/big; echo rc=$?; stat -c %s /tmp/big")
        assert "rc=0" not in r.output
        assert r.output.strip().endswith("1048576")


def test_teardown_leaves_no_process(tmp_path):
    s = open_sandbox(SandboxSpec())
    s.exec("nohup sleep 1000 >/dev/null 2>&1 & (setsid sleep 1001 &) ; sleep 0.2")
    name, cg, nonce = s.name, s.cgroup, s.shell.nonce
    assert len(cg.pids()) >= 4
    root = s.plan.root
    s.stop()
    assert not cg.dirs
    left = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if (
                name.encode() in cmd
                or nonce.encode() in cmd
                or b"sleep\x001000" in cmd
                or b"sleep\x001001" in cmd
            ):
                left.append(p.name)
    assert left == []
    assert not root.exists()
    assert not [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if name in m]
    s.stop()  # idempotent


def test_background_server_survives_between_execs(sb):
    r = sb.exec(
        "cd /tmp && nohup python3 -m http.server 8765 --bind 127.0.0.1 >/tmp/srv.log 2>&1 &"
    )
    assert r.exit_code == 0
    r = sb.exec(
        "for i in $(seq 50); do curl -sf -o /dev/null http://127.0.0.1:8765/ && echo UP && break; sleep 0.1; done",
        timeout=20,
    )
    assert r.output.strip() == "UP"
    r = sb.exec(
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://localhost:8765/').status)\""
    )
    assert r.output.strip() == "200"


def test_put_and_get(sb, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("A")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    sb.put(src, "/tests")  # outside any bind: through the staging dir
    sb.put(src / "sub" / "a.txt", "/app/direct.txt")  # inside the workdir: direct
    r = sb.exec(
        "/tests/run.sh; cat /tests/sub/a.txt /app/direct.txt; echo made > /tmp/out.txt; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt"
    )
    assert r.output == "ran\nAA"
    sb.get("/tmp/out.txt", tmp_path / "got" / "out.txt")
    assert (tmp_path / "got" / "out.txt").read_text() == "made\n"
    sb.get("/tests", tmp_path / "got" / "tests")
    assert (tmp_path / "got" / "tests" / "sub" / "a.txt").read_text() == "A"
    assert (sb.logs_dir / "verifier" / "reward.txt").read_text() == "1\n"


def test_get_does_not_follow_symlinks_out_of_the_workdir(sb, tmp_path):
    sb.exec("ln -s /etc/shadow /app/leak; ln -s / /app/rootlink")
    sb.get("/app/leak", tmp_path / "leak")
    text = (tmp_path / "leak").read_text() if not (tmp_path / "leak").is_symlink() else ""
    for line in Path("/etc/shadow").read_text().splitlines():
        h = line.split(":")[1] if line.count(":") > 2 else ""
        if len(h) > 2:
            assert h not in text
    sb.put(tmp_path / "leak", "/app/rootlink/etc/t1-escape")  # resolves inside, not on the host
    assert not Path("/etc/t1-escape").exists()


def test_no_stale_runtime_dirs_of_ours():
    with open_sandbox(SandboxSpec()) as s:
        root = s.plan.root
        assert root.parent == runtime_root()
    assert not root.exists()
