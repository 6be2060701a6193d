"""Warm-started step commands (t1/run/warm_start.py): a `t1` command forked from the segment
driver behaves as the same command started afresh - its output, exit status, signals, death
with the driver, and no lock of the driver's - and `campaign.warm_start` decides which runs.

    .venv/bin/pytest tests/test_warm_start.py -q
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from t1.run.segment import Driver
from t1.run.warm_start import fork_command
from t1.store.lock import LOCK_NAME, hold_output, release_output


def finish(proc, timeout: float = 30.0) -> tuple[int, bytes]:
    """Drain the child's output until it exits (as the driver does)."""
    os.set_blocking(proc.stdout.fileno(), False)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = proc.stdout.read()
        if chunk:
            out += chunk
        if proc.poll() is not None:
            return proc.returncode, out + (proc.stdout.read() or b"")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"child still running after {timeout} s: {out[-500:]!r}")


@pytest.mark.parametrize(
    "argv",
    [["tasks", "check", "/nonexistent-task-dir"], ["no-such-subcommand"], ["--help"]],
)
def test_forked_command_says_and_exits_what_a_fresh_one_does(argv):
    fresh = subprocess.run(
        [sys.executable, "-m", "t1.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    code, out = finish(fork_command(argv))
    assert (code, out) == (fresh.returncode, fresh.stdout)


def _exits(how: str):
    def main(argv):
        atexit_note = Path(argv[0])
        import atexit

        atexit.register(lambda: atexit_note.write_text("child's own atexit ran"))
        print("before", flush=True)
        if how == "return":
            return 4
        if how == "string":
            raise SystemExit("t1 thing: a message")
        if how == "none":
            raise SystemExit(None)
        raise RuntimeError("boom")

    return main


@pytest.mark.parametrize(
    "how,code,says",
    [
        ("return", 4, b""),
        ("string", 1, b"t1 thing: a message"),
        ("none", 0, b""),
        ("raise", 1, b"RuntimeError: boom"),
    ],  # fmt: skip
)
def test_exit_status_output_and_atexit_as_python_gives_them(tmp_path, how, code, says):
    import atexit

    driver_note = tmp_path / "driver-atexit"
    hook = lambda: driver_note.write_text("ran")  # noqa: E731
    atexit.register(hook)
    try:
        got, out = finish(fork_command([str(tmp_path / "child-atexit")], main=_exits(how)))
    finally:
        atexit.unregister(hook)
    assert got == code
    assert out.startswith(b"before\n") and says in out
    assert (tmp_path / "child-atexit").read_text() == "child's own atexit ran"
    assert not driver_note.exists(), "the driver's atexit function ran in the child"


def _wait_for_signal(argv):
    Path(argv[0]).write_text(str(os.getpid()))
    time.sleep(60)
    return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2])
def test_signals_the_driver_catches_have_their_defaults_in_the_child(tmp_path, sig):
    from t1.supervise.child import StopRequest

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    try:
        stop = StopRequest()  # the driver's flag-only handlers
        proc = fork_command([str(tmp_path / "pid")], main=_wait_for_signal)
        deadline = time.monotonic() + 20
        while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(sig)
        code, _ = finish(proc)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert code == -sig, "a signal the driver only flags must end the child as in a fresh one"
    assert not stop.requested


def _fds(argv):
    from t1.store import lock

    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    print(json.dumps({"fds": links, "held": list(lock._HELD)}))
    return 0


def test_child_keeps_no_lock_of_the_drivers(tmp_path):
    out_dir = tmp_path / "iter"
    hold_output(out_dir, "t1 segment", inherit=False)
    try:
        code, out = finish(fork_command([], main=_fds))
        # and the driver's lock is still held: another taker is refused
        again = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from t1.store.lock import OutputLock; OutputLock({str(out_dir)!r}).acquire()",
            ],  # fmt: skip
            capture_output=True,
            text=True,
        )
    finally:
        release_output(out_dir)
    assert code == 0
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert str(out_dir / LOCK_NAME) not in seen["fds"] and seen["held"] == []
    assert again.returncode != 0 and "another writer holds" in again.stderr


def test_child_dies_with_the_driver(tmp_path):
    pid_file = tmp_path / "pid"
    driver = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_warm_start import _wait_for_signal
        from t1.run.warm_start import fork_command
        fork_command([{str(pid_file)!r}], main=_wait_for_signal)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(pid_file.read_text())
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":  # killed, waiting for init to reap it
                break
            time.sleep(0.02)
        else:
            assert not Path(f"/proc/{child}").exists(), "the forked child outlived its driver"
    finally:
        proc.kill()


@pytest.fixture
def driver(tmp_path):
    (tmp_path / "pool/train").mkdir(parents=True)
    manifest = {"schema_version": 1, "status": "complete", "tasks": [{"path": "task-a"}]}
    (tmp_path / "pool/train/manifest.json").write_text(json.dumps(manifest))

    def make(warm: bool) -> Driver:
        cfg = tmp_path / f"config-{warm}.yaml"
        cfg.write_text(f"run: {{name: t}}\ncampaign: {{warm_start: {str(warm).lower()}}}\n")
        args = argparse.Namespace(
            config=str(cfg), run_dir=str(tmp_path), steps=1, pool=None, iter=0,
            dry_run=False, source=str(tmp_path / "sft"), out=str(tmp_path / "DONE"),
        )  # fmt: skip
        return Driver(args)

    return make


def test_campaign_warm_start_decides_how_the_step_commands_start(driver, monkeypatch, capfd):
    import t1.run.segment as segment

    preloaded, forked, popened = [], [], []
    monkeypatch.setattr(segment, "preload", lambda arch: preloaded.append(arch) or (0, 0.0))
    # the suite's earlier tests may leave threads in this process: the driver's own is one
    threads = [1]
    monkeypatch.setattr(segment, "python_threads", lambda: threads[0])
    real_fork = segment.fork_command
    monkeypatch.setattr(
        segment, "fork_command", lambda argv: forked.append(argv) or real_fork(argv)
    )
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        popened.append(argv)
        return real_popen(argv, **kw)

    monkeypatch.setattr(segment.subprocess, "Popen", popen)
    cmd = ["t1", "tasks", "check", "/nonexistent-task-dir"]
    for warm in (True, False):
        d = driver(warm)
        d.warm_up()
        assert d.warm is warm
        assert d.call("train", cmd) == 1
        said = capfd.readouterr()
        assert "not a directory" in said.out and "train failed with exit 1" in said.err
    assert preloaded == ["qwen3_moe"] and forked == [cmd[1:]]
    assert len(popened) == 1 and popened[0][-3:] == cmd[1:]
    d = driver(True)
    d.launcher = lambda what, cmd: cmd  # job steps of an allocation start afresh
    d.warm_up()
    assert not d.warm
    threads[0] = 3  # another Python thread may hold a lock the child would never see released
    d = driver(True)
    d.warm_up()
    assert not d.warm and "warm start off: 3 Python threads" in capfd.readouterr().out


def test_preload_builds_the_conversion_mapping_a_forked_load_reuses(tmp_path, monkeypatch):
    """`from_pretrained` builds transformers' checkpoint conversion mapping on first use (~1,000
    regexes, 0.25 s of each forked rollout's and trainer's policy load); after the warm start's
    build, a load never builds it again: here the builder is made to fail once the cache is
    warm, and the load still works."""
    from transformers import conversion_mapping

    from t1.config import ModelConfig
    from t1.model.policy import build_policy, load_policy, save_policy
    from t1.run.warm_start import warm_conversion_mapping

    save_policy(build_policy(ModelConfig(layers=1, experts=4), vocab_size=64), tmp_path / "p")
    monkeypatch.setattr(conversion_mapping, "_checkpoint_conversion_mapping_cache", None)
    assert warm_conversion_mapping("qwen3_moe")

    def built_again():
        raise AssertionError("the conversion mapping was built again after the warm start")

    monkeypatch.setattr(conversion_mapping, "_build_checkpoint_conversion_mapping", built_again)
    assert load_policy(tmp_path / "p").config.model_type == "qwen3_moe"
    # and without the warm start the load does build it (the check above can fail)
    monkeypatch.setattr(conversion_mapping, "_checkpoint_conversion_mapping_cache", None)
    with pytest.raises(AssertionError, match="built again"):
        load_policy(tmp_path / "p")
