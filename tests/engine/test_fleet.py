"""The rollout fleet against real `t1 serve` replicas under a real `t1 supervise`.

Launch lines are pinned without servers. The rest runs two or three `t1 serve` subprocesses
(service children of `t1 supervise`, so a killed one is restarted by the supervisor) and
drives them with t1.engine.fleet: session-affine routing, weight updates, a failed update, a
stale replica, a replica without routing capture, and one replica killed (and one hung)
mid-step with its in-flight trajectories re-sampled.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from t1.config import ModelConfig, load_config
from t1.engine import launch
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.fleet import (
    Fleet,
    FleetError,
    ReplicaLost,
    StaleWeights,
    WeightUpdateFailed,
    after_rollout,
    before_rollout,
    run_resampled,
)
from t1.engine.local import LocalEngine
from t1.engine.sglang import EngineError, SGLangEngine
from t1.model.policy import build_policy, save_policy

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "workflow/config/qwen3.5-122b-a10b.yaml"
VOCAB = 512
GREEDY = SamplingParams(temperature=0, max_new_tokens=8)


# ---------------------------------------------------------------- launch lines (no servers)


def test_server_launch_line_of_the_preset_is_pinned():
    cfg = load_config(PRESET)
    line = launch.server_command(cfg, "/ckpt/actor", weight_version="v3")
    assert line == [
        "python", "-m", "sglang.launch_server", "--model-path", "/ckpt/actor",
        "--host", "0.0.0.0", "--port", "30000", "--tp-size", "8", "--ep-size", "8",
        "--dtype", "bfloat16", "--mem-fraction-static", "0.85", "--context-length", "65536",
        "--enable-return-routed-experts", "--random-seed", "0", "--weight-version", "v3",
    ]  # fmt: skip
    det = load_config(PRESET, {"run.deterministic": True})
    assert launch.server_command(det, "/ckpt/actor")[-1] == "--enable-deterministic-inference"
    two = load_config(PRESET, {"fleet.tp": 16})
    tail = launch.server_command(two, "/a", nnodes=2, node_rank=1, head="n4")[-6:]
    assert tail == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "n4:31000"]
    with pytest.raises(ValueError, match="head node"):
        launch.server_command(two, "/a", nnodes=2)
    with pytest.raises(ValueError, match="multiple of fleet.ep"):
        launch.server_command(load_config(PRESET, {"fleet.ep": 3}), "/a")


def test_router_launch_line_is_pinned():
    cfg = load_config(PRESET)
    assert launch.router_command(cfg, ["http://n4:30000", "http://n5:30000"]) == [
        "python", "-m", "sglang_router.launch_router", "--worker-urls", "http://n4:30000",
        "http://n5:30000", "--policy", "cache_aware", "--host", "0.0.0.0", "--port", "30080",
    ]  # fmt: skip


# ---------------------------------------------------------------- a supervised fleet


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_healthy(urls: list[str], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while not launch.healthy(url, 1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"{url} did not come up in {timeout_s:g} s")
            time.sleep(0.2)


def _pid_of(workdir: Path, name: str) -> int:
    """The supervisor's record of its child (WORKDIR/supervise.children.json)."""
    (path,) = workdir.glob("*children.json")
    return json.loads(path.read_text())["children"][name]["pid"]


def _server_pid(watcher: int) -> int:
    """The `t1 serve` started by a watcher (its only child)."""
    for _ in range(100):
        kids = Path(f"/proc/{watcher}/task/{watcher}/children").read_text().split()
        if kids:
            return int(kids[0])
        time.sleep(0.1)
    raise AssertionError(f"watcher {watcher} has no child")


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory):
    """Replicas r0, r1 (r1 under the health watcher, heartbeat `file`) and r2 without routing
    capture, as service children of a real `t1 supervise`; the main child waits for STOP."""
    root = tmp_path_factory.mktemp("fleet")
    save_policy(build_policy(ModelConfig(), VOCAB, seed=0), root / "p0")
    save_policy(build_policy(ModelConfig(), VOCAB, seed=1), root / "p1")
    cfg = root / "serve.yaml"
    cfg.write_text(
        "run: {threads: 1}\nengine: {dtype: float32, max_batch: 4}\n"
        "campaign: {backoff_s: 0.2, backoff_max_s: 0.5, max_restarts: 5, kill_grace_s: 1.0}\n"
    )
    ports = _free_ports(3)
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    base = [sys.executable, "-m", "t1.cli", "serve", "--config", str(cfg), "--model"]

    def serve(i: int, *extra: str) -> list[str]:
        return [*base, str(root / "p0"), "--port", str(ports[i]), *extra]

    watched = [sys.executable, "-m", "t1.engine.launch", "watch", "--url", urls[1]]
    children = [
        {"name": "r0", "role": "service", "heartbeat": "none", "cmd": serve(0)},
        {
            "name": "r1",
            "role": "service",
            "heartbeat": "file",
            "heartbeat_timeout_s": 3.0,
            "startup_timeout_s": 90.0,
            "cmd": [*watched, "--interval", "0.3", "--", *serve(1)],
        },
        {
            "name": "r2",
            "role": "service",
            "heartbeat": "none",
            "cmd": serve(2, "--without-routed-experts"),
        },
    ]
    spec = root / "spec.yaml"
    spec.write_text(json.dumps({"schema_version": 1, "children": children}))  # JSON is YAML
    stop = root / "STOP"
    main = f"import os,time\nwhile not os.path.exists({str(stop)!r}): time.sleep(0.2)"
    workdir = root / "sup"
    sup = subprocess.Popen(
        [sys.executable, "-m", "t1.cli", "supervise", "--config", str(cfg), "--workdir",
         str(workdir), "--deadline", "none", "--spec", str(spec), "--", sys.executable, "-c", main],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_healthy(urls)
        yield {"root": root, "urls": urls, "workdir": workdir, "sup": sup}
    finally:
        stop.write_text("")
        try:
            sup.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sup.kill()


@pytest.fixture(scope="module")
def references():
    torch.set_num_threads(1)
    return {
        s: LocalEngine(build_policy(ModelConfig(), VOCAB, seed=s), dtype="float32") for s in (0, 1)
    }


def _fleet(urls: list[str], **kw) -> Fleet:
    opts = dict(layers=4, k=2, num_experts=8, timeout_s=60, health_interval_s=0.3)
    opts.update(health_timeout_s=0.5, health_failures=2, rejoin_timeout_s=60)
    opts.update(kw)
    return Fleet(urls, **opts)


def _prompt(seed: int, n: int = 9) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g).tolist()


def _trajectory(fleet: Fleet, seed: int, turns: int = 3, tokens: int = 8, pause=None):
    """A multi-turn trajectory (one session): returns its turns' outputs and who served them."""
    session = f"traj-{seed}-{time.monotonic_ns()}"
    ids, start, out = _prompt(seed), 0, []
    sampling = SamplingParams(temperature=0, max_new_tokens=tokens)
    try:
        for t in range(turns):
            req = GenerateRequest(ids, sampling, session_id=session, routing_start=start)
            try:
                (res,) = fleet.generate([req])
            except ReplicaLost as e:
                return {"status": "FAILED", "reason": str(e), "turns": out}
            out.append({"ids": res.output_ids, "by": fleet.served_by[req.request_id]})
            if pause is not None:
                pause(t)
            start = len(ids) + len(res.output_ids) - 1
            ids = ids + res.output_ids + _prompt(seed * 31 + t, 4)
    finally:
        fleet.close_session(session)
    return {"status": "COMPLETED", "turns": out}


def _reference(engine: LocalEngine, seed: int, turns: int = 3, tokens: int = 8) -> list[list[int]]:
    ids, out = _prompt(seed), []
    for t in range(turns):
        sampling = SamplingParams(temperature=0, max_new_tokens=tokens)
        (res,) = engine.generate([GenerateRequest(ids, sampling)])
        out.append(res.output_ids)
        ids = ids + res.output_ids + _prompt(seed * 31 + t, 4)
    return out


def test_routing_is_session_affine_and_spreads_over_replicas(fleet_env, references):
    fleet = _fleet(fleet_env["urls"][:2])
    try:
        with_threads = []
        results: dict[int, dict] = {}
        for seed in range(4):
            th = threading.Thread(target=lambda s=seed: results.update({s: _trajectory(fleet, s)}))
            th.start()
            with_threads.append(th)
        for th in with_threads:
            th.join()
        for seed, res in results.items():
            assert res["status"] == "COMPLETED"
            assert [t["ids"] for t in res["turns"]] == _reference(references[0], seed)
            assert len({t["by"] for t in res["turns"]}) == 1  # every turn on one replica
        used = {res["turns"][0]["by"][0] for res in results.values()}
        assert used == set(fleet_env["urls"][:2])  # both replicas took trajectories
    finally:
        fleet.close()


def test_weights_reach_every_replica_and_answers_carry_the_version(fleet_env, references):
    root, urls = fleet_env["root"], fleet_env["urls"][:2]
    fleet = _fleet(urls)
    try:
        fleet.update_weights(str(root / "p1"), version="step-1")
        for url in urls:  # each replica itself, not only through the fleet
            with urllib.request.urlopen(url + "/get_model_info", timeout=10) as r:
                assert json.loads(r.read())["weight_version"] == "step-1"
            direct = SGLangEngine(url, layers=4, k=2, num_experts=8, timeout_s=60)
            (res,) = direct.generate([GenerateRequest(_prompt(7), GREEDY)])
            (ref,) = references[1].generate([GenerateRequest(_prompt(7), GREEDY)])
            assert res.output_ids == ref.output_ids
        res = _trajectory(fleet, 5)
        assert [t["ids"] for t in res["turns"]] == _reference(references[1], 5)
        # A replica that loads other weights behind the fleet's back: its answers are refused.
        body = {"model_path": str(root / "p0"), "weight_version": "rogue"}
        req = urllib.request.Request(
            urls[1] + "/update_weights_from_disk", json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["success"] is True
        stale = _fleet([urls[1], urls[0]])  # the rogue one first: it takes the first request
        stale.version, stale.path = "step-1", str(root / "p1")  # as after update_weights
        with pytest.raises(StaleWeights, match="sampled with weights 'rogue'"):
            stale.generate([GenerateRequest(_prompt(3), GREEDY)])
        assert stale.stats.stale_weights == 1 and not stale.replicas[0].up
        # a trajectory that meets it is re-sampled on the other replica, never admitted stale
        res = run_resampled(stale, lambda: _trajectory(stale, 6))
        assert [t["ids"] for t in res["turns"]] == _reference(references[1], 6)
        assert {t["by"][0] for t in res["turns"]} == {urls[0]}
        deadline = time.monotonic() + 30  # the monitor reloads step-1 into it, then rejoins it
        while not stale.replicas[0].up and time.monotonic() < deadline:
            time.sleep(0.1)
        with urllib.request.urlopen(urls[1] + "/get_model_info", timeout=10) as r:
            assert json.loads(r.read())["weight_version"] == "step-1"
        stale.close()
    finally:
        fleet.update_weights(str(root / "p0"), version="p0")
        fleet.close()


def test_a_failed_weight_update_stops_the_step_before_any_sample(fleet_env, tmp_path):
    root, urls = fleet_env["root"], fleet_env["urls"]
    fleet = _fleet(urls[:2])
    try:
        with pytest.raises(WeightUpdateFailed, match="update_weights_from_disk"):
            before_rollout(fleet, tmp_path / "no-such-export")
        with pytest.raises(WeightUpdateFailed, match="refusing to sample"):
            fleet.generate([GenerateRequest(_prompt(1), GREEDY)])
        assert fleet.stats.refused_after_failed_update == 1 and fleet.stats.requests == 0
        with pytest.raises(WeightUpdateFailed, match="refused to sample"):
            after_rollout(fleet, tmp_path / "rollout")
        report = json.loads((tmp_path / "rollout" / "fleet.json").read_text())
        assert report["failed_weight_updates"] == 1
        before_rollout(fleet, root / "p0")  # a good update lifts the refusal
        fleet.generate([GenerateRequest(_prompt(1), GREEDY)])
    finally:
        fleet.close()
    # One replica of two never comes back: the update fails on it, the other is not used.
    (dead,) = _free_ports(1)
    fleet = _fleet([urls[0], f"http://127.0.0.1:{dead}"], rejoin_timeout_s=1.0)
    try:
        with pytest.raises(WeightUpdateFailed, match=f"127.0.0.1:{dead}"):
            fleet.update_weights(str(root / "p0"), version="p0")
        with pytest.raises(WeightUpdateFailed):
            fleet.generate([GenerateRequest(_prompt(2), GREEDY)])
    finally:
        fleet.close()


def test_a_missing_routing_capture_aborts_the_trajectory_and_is_counted(fleet_env):
    fleet = _fleet([fleet_env["urls"][2]])
    try:
        with pytest.raises(EngineError, match="routed_experts") as e:
            fleet.generate([GenerateRequest(_prompt(4), GREEDY, session_id="s")])
        assert fleet_env["urls"][2] in str(e.value)
        assert fleet.stats.missing_routing == 1
        req = GenerateRequest(_prompt(4), GREEDY, return_routing=False)  # not asked: fine
        assert fleet.generate([req])[0].routing is None
    finally:
        fleet.close()


def _figures(fleet: Fleet) -> dict:
    """Counters, and seconds from the replica's loss to its rejoin (for LOG.md, with -s)."""
    s = fleet.summary()
    t = {e["event"]: e["time"] for e in reversed(fleet.events)}  # first of each kind
    keys = ("requests", "replica_lost", "resampled", "marked_down", "rejoined")
    return {k: s[k] for k in keys} | {
        "down_to_rejoin_s": round(t["rejoined"] - t["replica_down"], 1)
    }


def _incidents(workdir: Path) -> list[dict]:
    path = workdir / "incidents.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _run_step(fleet: Fleet, seeds: list[int], hit) -> dict[int, dict]:
    """Trajectories in parallel, each through run_resampled; `hit(turn)` runs after each turn."""
    results: dict[int, dict] = {}
    threads = [
        threading.Thread(
            target=lambda s=s: results.update(
                {s: run_resampled(fleet, lambda: _trajectory(fleet, s, tokens=12, pause=hit))}
            )
        )
        for s in seeds
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def _check_step(fleet: Fleet, results: dict[int, dict], references) -> None:
    for seed, res in results.items():
        assert res["status"] == "COMPLETED", res
        # never half-admitted: all turns of an admitted trajectory on one replica incarnation
        assert len({t["by"] for t in res["turns"]}) == 1, res["turns"]
        assert [t["ids"] for t in res["turns"]] == _reference(references[0], seed, tokens=12)


@pytest.mark.slow
def test_a_replica_killed_mid_step_is_restarted_and_its_trajectories_resampled(
    fleet_env, references
):
    urls, workdir, root = fleet_env["urls"][:2], fleet_env["workdir"], fleet_env["root"]
    fleet = _fleet(urls)
    fleet.update_weights(str(root / "p0"), version="p0")
    victim = _pid_of(workdir, "r0")
    killed = threading.Event()

    def kill_once(turn: int) -> None:  # after a first turn landed somewhere: r0 dies
        if turn == 0 and not killed.is_set():
            killed.set()
            os.kill(victim, signal.SIGKILL)

    try:
        results = _run_step(fleet, list(range(4)), kill_once)
        assert len(results) == 4
        _check_step(fleet, results, references)
        s = fleet.summary()
        assert s["replica_lost"] >= 1 and s["resampled"] >= 1 and s["resample_exhausted"] == 0
        assert s["marked_down"] >= 1
        # the supervisor restarts r0; the fleet loads the current weights and routes to it again
        deadline = time.monotonic() + 90
        while fleet.stats.rejoined < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fleet.stats.rejoined >= 1, fleet.events
        print("kill:", json.dumps(_figures(fleet)))
        assert any(
            i.get("child") == "r0" and i["kind"] == "child_restarted" for i in _incidents(workdir)
        )
        before = fleet.stats.per_replica[urls[0]]
        res = _trajectory(fleet, 11)
        assert res["turns"][0]["by"][0] == urls[0]  # the least-loaded: the restarted one
        assert fleet.stats.per_replica[urls[0]] > before
    finally:
        fleet.close()


@pytest.mark.slow
def test_a_hung_replica_is_declared_down_restarted_by_the_supervisor_and_resampled(
    fleet_env, references
):
    urls, workdir, root = fleet_env["urls"][:2], fleet_env["workdir"], fleet_env["root"]
    fleet = _fleet(urls)
    fleet.update_weights(str(root / "p0"), version="p0")
    server = _server_pid(_pid_of(workdir, "r1"))
    hung = threading.Event()

    def hang_once(turn: int) -> None:  # r1's server stops answering (its watcher stays up)
        if turn == 0 and not hung.is_set():
            hung.set()
            os.kill(server, signal.SIGSTOP)

    try:
        results = _run_step(fleet, list(range(20, 24)), hang_once)
        assert len(results) == 4
        _check_step(fleet, results, references)
        assert fleet.stats.replica_lost >= 1 and fleet.stats.resampled >= 1
        down = [e for e in fleet.events if e["event"] == "replica_down"]
        assert down and down[0]["replica"] == urls[1] and "health checks" in down[0]["message"]
        deadline = time.monotonic() + 90  # heartbeat stale -> supervisor kills, restarts r1
        while fleet.stats.rejoined < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fleet.stats.rejoined >= 1, fleet.events
        print("hang:", json.dumps(_figures(fleet)))
        assert any(
            i.get("child") == "r1" and i["kind"] == "child_hung" for i in _incidents(workdir)
        )
    finally:
        try:
            os.kill(server, signal.SIGCONT)
        except ProcessLookupError:
            pass
        fleet.close()


def test_make_engine_builds_a_fleet_only_over_sglang(tmp_path):
    from t1.engine import make_engine

    cfg = load_config(PRESET, {"fleet.urls": ["http://127.0.0.1:1", "http://127.0.0.1:2"]})
    with pytest.raises(ValueError, match="fleet.urls has 2 URLs but fleet.replicas is 4"):
        make_engine(cfg)
    fleet = make_engine(load_config(PRESET, {"fleet.urls": [f"http://h{i}:1" for i in range(4)]}))
    assert isinstance(fleet, Fleet) and len(fleet.replicas) == 4
    fleet.close()
    with pytest.raises(ValueError, match="a fleet is SGLang servers"):
        make_engine(load_config(PRESET, {"engine.backend": "local"}), tmp_path)
    env = os.environ.pop("SLURM_JOB_NODELIST", None)
    try:
        with pytest.raises(ValueError, match="not inside an allocation"):
            make_engine(load_config(PRESET))
    finally:
        if env is not None:
            os.environ["SLURM_JOB_NODELIST"] = env


def test_fleet_refuses_bad_urls():
    with pytest.raises(ValueError, match="at least one"):
        Fleet([], layers=1, k=1, num_experts=2, monitor=False)
    with pytest.raises(ValueError, match="twice"):
        Fleet(["http://a:1", "http://a:1/"], layers=1, k=1, num_experts=2, monitor=False)
    fleet = Fleet([f"http://127.0.0.1:{_free_ports(1)[0]}"], layers=4, k=2, num_experts=8)
    try:
        with pytest.raises(ReplicaLost, match="died"):
            fleet.generate([GenerateRequest(_prompt(0), GREEDY)])
        with pytest.raises(FleetError, match="no replica is up"):
            fleet.generate([GenerateRequest(_prompt(0), GREEDY)])
    finally:
        fleet.close()
