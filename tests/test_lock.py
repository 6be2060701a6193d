"""t1.store.lock with real processes: one writer per output, parent-death kills, pid-file reaping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t1.store.lock import LOCK_NAME, LockHeld, OutputLock, PidFile, same_process

HOLD = """
import sys, time
from t1.store.lock import hold_output
hold_output(sys.argv[1], "holder")
print("locked", flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait(pred, timeout=10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def _holder(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"locked"
    return proc


def test_second_writer_is_refused_naming_the_holder_pid(tmp_path):
    proc = _holder(tmp_path)
    try:
        with pytest.raises(LockHeld, match=rf"pid {proc.pid} .*alive.*'holder'"):
            OutputLock(tmp_path).acquire(wait_s=0.3)
    finally:
        proc.kill()
        proc.wait()
    with OutputLock(tmp_path, "second") as lock:  # the kernel dropped the dead holder's lock
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
        assert lock.holder()["what"] == "second"


def test_a_waiting_writer_gets_the_lock_when_the_holder_exits(tmp_path):
    proc = _holder(tmp_path)
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -9 {proc.pid}"])
    lock = OutputLock(tmp_path).acquire(wait_s=10)
    assert proc.poll() == -9  # it waited for the holder's death, not past a live holder
    lock.release()
    killer.wait()
    proc.wait()


def test_children_inherit_the_lock_so_an_orphan_keeps_the_output(tmp_path):
    code = HOLD.replace(
        'print("locked", flush=True)',
        "import subprocess\nc = subprocess.Popen(['sleep', '60'], close_fds=False)\n"
        "print(c.pid, flush=True)",
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
    child = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    try:
        with pytest.raises(LockHeld, match="exited; a child it started still holds"):
            OutputLock(tmp_path).acquire()
    finally:
        os.kill(child, signal.SIGKILL)
    assert _wait(lambda: not _alive(child))
    OutputLock(tmp_path).acquire().release()


def test_die_with_parent_kills_the_child_of_a_sigkilled_parent(tmp_path):
    code = (
        "import subprocess, sys, time\nfrom t1.store.lock import die_with_parent\n"
        "c = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent)\n"
        "print(c.pid, flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    child = int(proc.stdout.readline())
    assert _alive(child)
    proc.kill()
    proc.wait()
    assert _wait(lambda: not _alive(child), 5.0), "the child outlived its SIGKILLed parent"


def test_pid_file_reaps_the_same_program_only(tmp_path):
    pids = PidFile(tmp_path / "children.json")
    # its own process group (as the supervisor starts children), with a grandchild inside
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"])
    try:
        pids.add("leader", leader.pid)
        pids.add("other", other.pid)
        rec = pids.read()["other"]
        assert same_process(rec)
        # the pid now belongs to another program (recorded start time differs): not touched
        data = json.loads(pids.path.read_text())
        data["children"]["other"]["start"] -= 1
        pids.path.write_text(json.dumps(data))
        killed = pids.reap()
        assert [k["name"] for k in killed] == ["leader"]
        leader.wait(timeout=5)
        assert leader.returncode == -signal.SIGKILL
        grandchildren = subprocess.run(
            ["pgrep", "-g", str(leader.pid)], capture_output=True, text=True
        ).stdout.split()
        assert not [p for p in grandchildren if _alive(int(p))], "the group outlived the reap"
        assert other.poll() is None and pids.read() == {}
    finally:
        for p in (leader, other):
            p.kill()
            p.wait()


def test_reap_never_kills_the_reaper_its_parent_or_its_group(tmp_path):
    """`t1 segment` runs in the workdir of the `t1 supervise` that records it: were it to
    reap its own record it would SIGKILL itself (the bug this guards against)."""
    pids = PidFile(tmp_path / "children.json")
    pids.add("me", os.getpid())
    pids.add("parent", os.getppid())
    assert pids.reap(grace_s=0.2) == []


def test_an_in_process_holder_gives_its_output_up_to_the_next_process(tmp_path):
    """hold_output keeps DIR for the process's life; release_output gives it up (a stage run
    in-process by a test, whose output a subprocess writes next)."""
    from t1.store.lock import hold_output, release_output

    take = "from t1.store.lock import hold_output; import sys; hold_output(sys.argv[1], 'next')"
    out = tmp_path / "out"
    hold_output(out, "first")
    p = subprocess.run([sys.executable, "-c", take, str(out)], capture_output=True, text=True)
    assert p.returncode != 0 and "another writer holds" in p.stderr, p.stderr
    assert release_output(out) and not release_output(out)
    p = subprocess.run([sys.executable, "-c", take, str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_spawn_records_the_child_before_it_runs_anything(tmp_path, monkeypatch):
    """Popen returns after the exec, so a driver killed before `add` left a child no file named
    (CI, 2026-12-06: a supervisor's orphaned grandchild outlived the next one). PidFile.spawn
    holds the command at a gate until its record is on disk."""
    pids, marker = PidFile(tmp_path / "children.json"), tmp_path / "ran"
    seen = []

    def record(name, rec):  # the driver is slow to write its record: the child must wait
        time.sleep(0.5)
        seen.append(marker.exists())
        PidFile._record(pids, name, rec)

    monkeypatch.setattr(pids, "_record", record)
    proc = pids.spawn("c", ["sh", "-c", f"touch {marker}; sleep 60"], start_new_session=True)
    try:
        assert seen == [False], "the command ran before its record was written"
        assert _wait(marker.exists)
        rec = pids.read()["c"]
        assert rec["pid"] == rec["pgid"] == proc.pid
        assert same_process(rec), "recorded under the command it became, not the gate"
        assert [k["name"] for k in pids.reap()] == ["c"]
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_driver_dying_before_its_record_leaves_a_child_that_never_runs(tmp_path, monkeypatch):
    pids, marker = PidFile(tmp_path / "children.json"), tmp_path / "ran"

    def killed(name, rec):  # as if the driver were SIGKILLed here: its end of the gate closes
        raise KeyboardInterrupt

    monkeypatch.setattr(pids, "_record", killed)
    with pytest.raises(KeyboardInterrupt):
        pids.spawn("c", ["sh", "-c", f"touch {marker}"])
    time.sleep(0.5)
    assert not marker.exists()


def test_spawn_of_a_missing_program_raises_as_popen_does(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-program-t1"):
        PidFile(tmp_path / "c.json").spawn("c", ["no-such-program-t1"])
    assert not (tmp_path / "c.json").exists()


def test_spawn_finds_a_relative_program_in_the_childs_cwd(tmp_path):
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "hello"
    prog.write_text("#!/bin/sh\necho hello\n")
    prog.chmod(0o755)
    pids = PidFile(tmp_path / "c.json")
    proc = pids.spawn("c", ["./hello"], cwd=tmp_path / "bin", stdout=subprocess.PIPE)
    assert proc.communicate(timeout=10)[0] == b"hello\n" and proc.returncode == 0
    assert pids.read()["c"]["cmdline"] == ["./hello"]
