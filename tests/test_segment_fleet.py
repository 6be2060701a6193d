"""The fleet segment's lines and guards without Slurm (t1/run/segment_fleet.py, t1/run/plan.py).

    .venv/bin/pytest tests/test_segment_fleet.py -q

The colocated split and its srun lines (`t1 serve` replica step and trainer step, both
`--overlap`) are pinned; refused options are named; a replica step that keeps exiting is
restarted `MAX_RESTARTS` times and then stops the segment naming its log, and one that never
answers /health stops it at `fleet.start_timeout_s` (real processes; the Slurm run is
tests/slurm/test_fleet_segment.py).

Hangs (t1/run/replica_watch.py): a real HTTP server that first exits, then is SIGSTOPped twice,
is restarted for each (exited, hung) and given up at the third failure, and the stopped
processes die; two real `t1 serve` replicas under the health watcher, one SIGSTOPped: it is
killed, started again, loaded with the newest export at its weight_version and serves at it,
while the other is left alone; the watcher's heartbeat goes stale on a stopped server, SIGTERM
reaches a stopped server, and a SIGKILLed watcher takes its server down.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from t1.config import ModelConfig, load_config
from t1.engine import allocation, launch
from t1.model.policy import build_policy, save_policy
from t1.run import plan, segment_fleet
from t1.run.segment_fleet import (
    FleetStepError,
    ReplicaSteps,
    export_version,
    fleet_steps_wanted,
    localize,
    newest_export,
)

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "workflow/config/tiny.yaml"
OVERLAY = REPO / "tests/slurm/fleet.yaml"
PRESET = REPO / "workflow/config/qwen3.5-122b-a10b.yaml"


def fleet_cfg(tmp_path: Path, **sets):
    import yaml

    merged = yaml.safe_load(TINY.read_text())
    for k, v in yaml.safe_load(OVERLAY.read_text()).items():
        merged.setdefault(k, {}).update(v)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(merged))
    return load_config(path, sets or None), str(path)


def test_colocated_split_and_its_job_step_lines_are_pinned(tmp_path):
    cfg, path = fleet_cfg(tmp_path, **{"fleet.replicas": 2})
    split = allocation.split_allocation(cfg, ["localhost"])
    assert split["trainer"] == ["localhost"]
    assert [(r["nodes"], r["url"]) for r in split["replicas"]] == [
        (["localhost"], "http://localhost:30400"),
        (["localhost"], "http://localhost:30401"),
    ]
    line = plan.replica_command(cfg, split["replicas"][1], "/sft/actor", path)
    assert line == [
        "srun", "--nodes=1", "--ntasks-per-node=1", "--nodelist=localhost", "--job-name=replica1",
        "--kill-on-bad-exit=1", "--overlap", "python", "-m", "t1.engine.launch", "watch",
        "--url", "http://localhost:30401", "--interval", "1", "--",
        "python", "-m", "t1.cli", "serve", "--config", path, "--model", "/sft/actor",
        "--host", "0.0.0.0", "--port", "30401", "--weight-version", "/sft/actor",
    ]  # fmt: skip
    lay = plan.trainer_layout(cfg, 1)["layout"]
    _, train = plan.trainer_command(cfg, ["localhost"], lay, ["t1", "train", "--x"], "r")
    assert train == [
        "srun", "--nodes=1", "--ntasks-per-node=1", "--nodelist=localhost", "--job-name=trainer",
        "--kill-on-bad-exit=1", "--overlap", "t1", "train", "--x",
    ]  # fmt: skip
    runnable = localize(train)
    assert runnable[7] in (str(Path(sys.executable).with_name("t1")), sys.executable)
    assert "python" not in localize(line) and sys.executable in localize(line)


def test_the_split_across_nodes_is_unchanged_and_refusals_are_named(tmp_path):
    cfg = load_config(PRESET)
    split = allocation.split_allocation(cfg, [f"n{i}" for i in range(8)])
    assert split["trainer"] == ["n0", "n1", "n2", "n3"]
    assert [r["url"] for r in split["replicas"]][0] == "http://n4:30000"
    assert "--overlap" not in plan.replica_command(cfg, split["replicas"][0], "/a")
    with pytest.raises(ValueError, match="fleet.colocate needs one node per replica"):
        allocation.split_allocation(
            load_config(PRESET, {"fleet.colocate": True, "fleet.tp": 16}), ["a"]
        )
    bad, path = fleet_cfg(tmp_path, **{"fleet.server": "vllm"})
    with pytest.raises(ValueError, match="fleet.server is 'vllm'"):
        plan.replica_command(
            bad, allocation.split_allocation(bad, ["h"])["replicas"][0], "/a", path
        )
    cfg, _ = fleet_cfg(tmp_path)
    with pytest.raises(ValueError, match="needs the config path"):
        plan.replica_command(cfg, allocation.split_allocation(cfg, ["h"])["replicas"][0], "/a")


def test_fleet_steps_only_inside_an_allocation_without_fixed_urls(tmp_path, monkeypatch):
    cfg, _ = fleet_cfg(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not fleet_steps_wanted(cfg)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert fleet_steps_wanted(cfg)
    fixed, _ = fleet_cfg(tmp_path, **{"fleet.urls": ["http://h:1"]})
    assert not fleet_steps_wanted(fixed)
    none, _ = fleet_cfg(tmp_path, **{"fleet.replicas": 0})
    assert not fleet_steps_wanted(none)


def test_a_replica_step_that_keeps_exiting_is_restarted_then_stops_the_segment(
    tmp_path, monkeypatch
):
    cfg, path = fleet_cfg(tmp_path)
    # the segment's heartbeat is not the replica's: a healthy server must not keep it fresh
    monkeypatch.setenv("T1_HEARTBEAT_FILE", str(tmp_path / "beat"))
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    code = "import os; print('replica boom', os.environ.get('T1_HEARTBEAT_FILE')); exit(4)"
    steps.lines = {0: [sys.executable, "-c", code]}
    steps.spawn_lines()
    try:
        with pytest.raises(FleetStepError) as e:
            steps.wait_healthy(60)
    finally:
        steps.stop()
    msg = str(e.value)
    assert "replica 0 step exited 3 times (last rc 4)" in msg and "replica0.log" in msg, msg
    assert "replica boom None" in msg  # the log's tail; no heartbeat file for the replica
    started = [ev for ev in steps.events if ev["event"] == "started"]
    assert len(started) == segment_fleet.MAX_RESTARTS + 1


def test_a_replica_step_that_never_answers_health_times_out_naming_its_log(tmp_path):
    cfg, path = fleet_cfg(tmp_path)
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    steps.lines = {0: [sys.executable, "-c", "import time; print('slow'); time.sleep(60)"]}
    steps.spawn_lines()
    try:
        with pytest.raises(FleetStepError, match=r"did not answer /health within .* 2 s"):
            steps.wait_healthy(2)
    finally:
        steps.stop()
    assert steps.events[-1]["event"] == "stopped" and steps.events[-1]["rc"] == -15
    # not up yet is not hung: the start timeout owns a replica that never answered
    assert not any(ev["event"] in ("hung", "killed") for ev in steps.events), steps.events


# ---------------------------------------------------------------- hangs (t1/run/replica_watch.py)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _alive(pid: int) -> bool:
    """`pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(pred, timeout_s: float, what: str, steps: ReplicaSteps | None = None) -> None:
    """Until `pred()`; fails after `timeout_s`, or at once when `steps` gave a replica up,
    with its events and restarts (what a failure in CI needs to be read)."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        given_up = steps is not None and steps.failure is not None
        if given_up or time.monotonic() > deadline:
            why = (
                f"replica given up: {steps.failure}" if given_up else f"not within {timeout_s:g} s"
            )
            seen = f"\nevents {steps.events}\nrestarts {steps.restarts}" if steps else ""
            pytest.fail(f"{what}: {why}{seen}")
        time.sleep(0.1)


def _child(pid: int) -> int:
    """The one child of `pid` (the server under a watcher)."""
    kids: list[str] = []
    _wait(
        lambda: (
            bool(kids.extend(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()))
            or bool(kids)
        ),
        30,
        f"a child of {pid}",
    )
    return int(kids[0])


def _http_server(tmp_path: Path, port: int) -> list[str]:
    """A real HTTP server whose GET /health answers 200 (a file of that name)."""
    www = tmp_path / "www"
    www.mkdir(exist_ok=True)
    (www / "health").write_text("ok")
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(www)]


FAST = {
    "fleet.health_interval_s": 0.2,
    "fleet.health_timeout_s": 0.5,
    "fleet.health_failures": 3,
    "fleet.start_timeout_s": 60.0,
}


def test_exits_and_hangs_count_against_one_restart_limit(tmp_path):
    cfg, path = fleet_cfg(tmp_path, **FAST)
    (port,) = _free_ports(1)
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    steps.replicas[0]["url"] = f"http://127.0.0.1:{port}"
    mark = tmp_path / "started_once"
    serve = " ".join(_http_server(tmp_path, port))
    first_exits = f"if [ ! -e {mark} ]; then touch {mark}; exit 5; fi; exec {serve}"
    steps.lines = {0: ["bash", "-c", first_exits]}
    steps.spawn_lines()
    try:
        steps.wait_healthy(60)  # the first start exits with 5: restarted, then it answers
        steps.wait_ready(60)
        (exited,) = steps.restarts[0]
        assert exited["reason"] == "exited" and exited["detail"] == "rc 5", exited
        assert exited["old_step"] is None and exited["new_step"] is None  # no Slurm here
        # a replica that answers is left alone (the negative control of the hang check)
        time.sleep(8 * cfg.fleet.health_interval_s)
        assert len(steps.restarts[0]) == 1 and steps.failure is None, steps.restarts
        stopped = steps.procs[0].pid
        os.kill(stopped, signal.SIGSTOP)  # alive, /health never answers: hung
        _wait(lambda: len(steps.restarts[0]) == 2, 30, "a restart of the hung replica")
        assert steps.wait_ready(60) < 60
        hung = steps.restarts[0][1]
        assert hung["reason"] == "hung" and "3 /health checks in a row failed" in hung["detail"]
        assert hung["healthy_after_s"] >= 0 and not _alive(stopped)  # the stopped one died
        os.kill(again := steps.procs[0].pid, signal.SIGSTOP)
        _wait(lambda: steps.failure is not None, 30, "the replica given up")
        with pytest.raises(FleetStepError, match="failed 3 times"):
            steps.wait_ready(5)
    finally:
        steps.stop()
    assert steps.failure.startswith(
        "replica 0 step failed 3 times (exited 1, hung 2; last: hung: 3 /health checks"
    ), steps.failure
    assert "replica0.log" in steps.failure and not _alive(again)
    assert len(steps.restarts[0]) == segment_fleet.MAX_RESTARTS
    kinds = [ev["event"] for ev in steps.events]
    assert kinds.count("started") == 3 and kinds.count("hung") == 2, kinds
    assert kinds.count("killed") == 3 and "given_up" in kinds, kinds


def test_a_hang_right_after_the_first_answer_is_found(tmp_path):
    """The replica hangs after the driver's wait saw it answer but before its monitor's first
    successful check (here: the monitor checks every 1.5 s and its first check comes before the
    server is up). The driver's sighting counts, so the hang is found and the replica restarted;
    before, the replica stayed 'not up yet' and was never found hung."""
    sets = {**FAST, "fleet.health_interval_s": 1.5, "fleet.health_failures": 2}
    cfg, path = fleet_cfg(tmp_path, **sets)
    (port,) = _free_ports(1)
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    steps.replicas[0]["url"] = f"http://127.0.0.1:{port}"
    steps.lines = {0: ["bash", "-c", "sleep 0.6; exec " + " ".join(_http_server(tmp_path, port))]}
    steps.spawn_lines()
    try:
        steps.wait_healthy(60)
        os.kill(stopped := steps.procs[0].pid, signal.SIGSTOP)  # bash exec'd: this is the server
        _wait(lambda: len(steps.restarts[0]) == 1, 30, "a restart of the hung replica", steps)
        assert steps.restarts[0][0]["reason"] == "hung", steps.restarts
        steps.wait_ready(60)
        assert not _alive(stopped)
    finally:
        steps.stop()


@pytest.mark.slow  # ~30 s: three `t1 serve` starts
def test_a_hung_t1_serve_is_killed_restarted_and_serves_the_current_weights(tmp_path):
    """Two real `t1 serve` replicas under the health watcher; one is SIGSTOPped (its server,
    not the watcher): the driver kills it, starts it again, loads the newest export at the
    fleet's weight_version and checks it; the other is left alone."""
    # slower checks than FAST: two busy servers on a loaded machine must not look hung
    sets = {**FAST, "fleet.health_interval_s": 0.3, "fleet.health_timeout_s": 2.0}
    cfg, path = fleet_cfg(tmp_path, **{**sets, "fleet.replicas": 2, "run.threads": 1})
    for seed in (0, 1):
        save_policy(build_policy(ModelConfig(), 512, seed=seed), tmp_path / f"p{seed}")
    new = tmp_path / "p1"
    steps = ReplicaSteps(
        cfg, path, tmp_path / "iter", ["localhost"], current=lambda: (str(new), export_version(new))
    )
    urls = []
    for r, port in zip(steps.replicas, _free_ports(2), strict=True):
        r["url"] = url = f"http://127.0.0.1:{port}"
        urls.append(url)
        server = launch.server_command(
            cfg, str(tmp_path / "p0"), host="127.0.0.1", port=port, weight_version="v0",
            config_path=path,
        )  # fmt: skip
        steps.lines[r["index"]] = localize(launch.watch_command(url, server, 0.3))
    steps.spawn_lines()
    try:
        steps.wait_healthy(180)
        server = _child(steps.procs[0].pid)  # t1 serve under replica 0's watcher
        os.kill(server, signal.SIGSTOP)
        _wait(
            lambda: steps.restarts[0] and "weight_version" in steps.restarts[0][-1],
            180,
            "back",
            steps,
        )
        steps.wait_ready(60)
        (entry,) = steps.restarts[0]
        assert entry["reason"] == "hung" and "error" not in entry, entry
        assert entry["model_path"] == str(new) and entry["weight_version"] == export_version(new)
        _wait(lambda: not _alive(server), 10, "the stopped server's death")
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        req = urllib.request.Request(
            urls[0] + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            meta = json.loads(r.read())["meta_info"]
        assert meta["weight_version"] == export_version(new), meta
        # the healthy replica was not touched: no restart, still its launch weights
        assert steps.restarts[1] == [] and steps.failure is None
        assert segment_fleet.model_info(urls[1])["weight_version"] == "v0"
    finally:
        steps.stop()
    mine = [ev["event"] for ev in steps.events if ev["replica"] == 0]
    assert mine[:6] == ["started", "hung", "killed", "started", "back", "stopped"], mine


def test_newest_export_is_the_last_finished_step_else_the_start(tmp_path):
    from t1.run.steps import step_dir

    start = tmp_path / "sft/actor"
    assert newest_export(tmp_path, range(4, 6), start) == start
    (step_dir(tmp_path, 4) / "train/actor").mkdir(parents=True)
    (step_dir(tmp_path, 5) / "train/actor").mkdir(parents=True)  # running: no DONE.json yet
    assert newest_export(tmp_path, range(4, 6), start) == start
    (step_dir(tmp_path, 4) / "train/DONE.json").write_text("{}")
    assert newest_export(tmp_path, range(4, 6), start) == step_dir(tmp_path, 4) / "train/actor"
    assert export_version(tmp_path / "x/../sft/actor") == str(start.resolve())
    from t1.engine.weight_update import version_of  # the fleet client's and the push's

    assert export_version(tmp_path / "x/../sft/actor") == version_of(start)


def test_the_watcher_goes_stale_on_a_stopped_server_and_takes_it_down_when_it_dies(tmp_path):
    """launch.watch: a SIGSTOPped server stops the heartbeat (t1 supervise's hang signal);
    SIGTERM reaches the stopped server (SIGCONT after it); SIGKILL of the watcher kills it."""
    beat = tmp_path / "beat"
    env = {**os.environ, "T1_HEARTBEAT_FILE": str(beat)}
    watchers = []
    for n in range(2):
        (port,) = _free_ports(1)
        cmd = [sys.executable, "-m", "t1.engine.launch", "watch", "--url"]
        cmd += [f"http://127.0.0.1:{port}", "--interval", "0.2", "--"]
        cmd += _http_server(tmp_path, port)
        w = subprocess.Popen(cmd, env=env if n == 0 else None, stderr=subprocess.DEVNULL)
        watchers.append((w, _child(w.pid)))
    try:
        (w0, s0), (w1, s1) = watchers
        _wait(beat.exists, 30, "the first heartbeat")
        t = beat.stat().st_mtime_ns
        _wait(lambda: beat.stat().st_mtime_ns != t, 10, "a fresh heartbeat")  # control: it beats
        os.kill(s0, signal.SIGSTOP)
        time.sleep(1.0)  # a check in flight may still land; then no more
        t = beat.stat().st_mtime_ns
        time.sleep(1.5)
        assert beat.stat().st_mtime_ns == t and _alive(s0)  # stale, server alive but stopped
        w0.send_signal(signal.SIGTERM)
        assert w0.wait(timeout=20) != 0 and not _alive(s0)
        os.kill(s1, signal.SIGSTOP)
        w1.kill()
        w1.wait(timeout=10)
        _wait(lambda: not _alive(s1), 10, "the stopped server of a SIGKILLed watcher to die")
    finally:
        for w, s in watchers:
            for pid in (w.pid, s):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            w.wait(timeout=10)


def test_the_trainer_step_pushes_to_the_replicas_only_in_distributed_mode(tmp_path):
    """fleet.weight_update distributed: the trainer job step gets --push-to with every replica
    of the split (t1/train/push.py); disk: it does not (the fleet loads the export)."""
    from t1.config import load_config
    from t1.run.segment_fleet import trainer_launcher

    split = {
        "trainer": ["n0"],
        "replicas": [
            {"index": 0, "url": "http://n1:30000"},
            {"index": 1, "url": "http://n2:30000"},
        ],
    }
    cmd = ["t1", "train", "--config", "c.yaml", "--stage", "ppo", "--in", "x"]
    cmd += ["--from", "y", "--out", str(tmp_path / "step_000003/train")]
    for mode, pushed in (("distributed", True), ("disk", False)):
        cfg = load_config(REPO / "tests/slurm/fleet.yaml", {"fleet.weight_update": mode})
        line = trainer_launcher(cfg, split, [])("train", list(cmd))
        if pushed:
            assert line[line.index("--push-to") + 1] == "http://n1:30000,http://n2:30000"
        else:
            assert "--push-to" not in line
