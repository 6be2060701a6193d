"""SGLang's distributed weight update, for real: this process is rank 0 of a gloo group, two
`t1 serve` subprocesses the receivers (t1/engine/weight_update.py, t1/engine/serve.py).

Checked: after a push of perturbed weights every replica holds the sender's tensors bit for
bit (per-tensor sha256 over `/weights_checksum`), stamps the version, and samples exactly what
a replica that loaded the same weights from disk samples (greedy ids, logprobs and routes);
the negative controls (a tensor left out, a tensor changed after sending) are caught by that
comparison; an unknown name is refused with the old weights kept (a multi-bucket update is all
or nothing); a replica killed in the middle makes `send` raise naming it while the other keeps
serving its old weights; a sender that already has a default process group works; the fleet's
`weight_update: distributed` checks the push and loads the export from disk where it is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from shared_fixtures import replica_checksums, serve_replica, stop_replica

from t1.config import ConfigError, ModelConfig, load_config
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.fleet import Fleet, before_rollout
from t1.engine.sglang import SGLangEngine
from t1.engine.weight_update import (
    WeightSyncError,
    WeightUpdateGroup,
    buckets,
    parse_dtype,
    reported_version,
    tensor_checksum,
    version_of,
)
from t1.model.policy import build_policy, load_policy, save_policy

REPO = Path(__file__).resolve().parents[2]
VOCAB = 512
GREEDY = SamplingParams(temperature=0, max_new_tokens=10)
CONFIG = "run: {threads: 1}\nengine: {dtype: float32, max_batch: 4}\n"


def _serve(model: Path, cfg: Path) -> tuple[subprocess.Popen, str]:
    return serve_replica(model, cfg)


def _stop(proc: subprocess.Popen) -> None:
    stop_replica(proc)


def _perturbed(seed: int) -> dict[str, torch.Tensor]:
    """The seed-0 policy's state with every tensor moved by a seeded perturbation."""
    g = torch.Generator().manual_seed(seed)
    state = build_policy(ModelConfig(), VOCAB, seed=0).state_dict()
    return {n: t + 0.05 * torch.randn(t.shape, generator=g) for n, t in state.items()}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Replicas a, b (receivers, on p0) and d (loads the perturbed weights from disk)."""
    root = tmp_path_factory.mktemp("wu")
    save_policy(build_policy(ModelConfig(), VOCAB, seed=0), root / "p0")
    model = build_policy(ModelConfig(), VOCAB, seed=0)
    new = _perturbed(1)
    model.load_state_dict(new)
    save_policy(model, root / "p1")
    cfg = root / "serve.yaml"
    cfg.write_text(CONFIG)
    procs = [_serve(root / "p0", cfg), _serve(root / "p0", cfg), _serve(root / "p1", cfg)]
    try:
        yield {"root": root, "cfg": cfg, "urls": [u for _, u in procs], "new": new}
    finally:
        for p, _ in procs:
            _stop(p)


def _checksums(url: str) -> dict:
    return replica_checksums(url)


def _differing(url: str, want: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensor on the replica differs from `want` (or is missing on either side)."""
    got = _checksums(url)["tensors"]
    sums = {n: tensor_checksum(t) for n, t in want.items()}
    return sorted(n for n in set(got) | set(sums) if got.get(n) != sums.get(n))


def _samples(url: str) -> list[tuple]:
    client = SGLangEngine(url, layers=4, k=2, num_experts=8, timeout_s=120)
    out = []
    for seed in (0, 1, 2):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, VOCAB, (7 + seed,), generator=g).tolist()
        (res,) = client.generate([GenerateRequest(ids, GREEDY)])
        out.append((res.output_ids, res.output_logprobs, res.routing))
    client.close()
    return out


def _same_samples(a: list[tuple], b: list[tuple]) -> bool:
    return all(
        x[0] == y[0] and np.allclose(x[1], y[1], atol=1e-6) and np.array_equal(x[2], y[2])
        for x, y in zip(a, b, strict=True)
    )


def _post(url: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ---------------------------------------------------------------- no servers


def test_buckets_respect_the_size_and_mark_the_last():
    ts = [(f"t{i}", torch.zeros(n)) for i, n in enumerate((10, 10, 30, 5, 5))]  # 4 bytes each
    got = [([n for n, _ in b], last) for b, last in buckets(iter(ts), 80)]
    assert got == [(["t0", "t1"], False), (["t2"], False), (["t3", "t4"], True)]
    assert [len(b) for b, _ in buckets(ts, 1)] == [1] * 5  # a larger tensor goes alone
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(buckets(ts, 0))
    assert (
        parse_dtype("bfloat16") is torch.bfloat16 and parse_dtype("torch.float32") is torch.float32
    )
    with pytest.raises(ValueError, match="unknown dtype 'Tensor'"):
        parse_dtype("Tensor")
    a = torch.arange(4, dtype=torch.float32)
    assert tensor_checksum(a) == tensor_checksum(a.clone())
    assert tensor_checksum(a) != tensor_checksum(a.to(torch.bfloat16))  # dtype is hashed
    assert tensor_checksum(a) != tensor_checksum(a.reshape(2, 2))  # so is the shape


# ---------------------------------------------------------------- real replicas


def test_a_push_equals_a_disk_load_bit_for_bit(env):
    a, b, d = env["urls"]
    new = env["new"]
    before = _samples(a)
    assert _differing(a, new)  # the perturbation changed every tensor ...
    assert _differing(d, new) == []  # ... and the disk replica holds exactly the new weights
    with WeightUpdateGroup([a, b], timeout_s=60) as group:
        record = group.send(new.items(), version="step-1", bucket_bytes=256 << 10)
    payload = sum(t.numel() * t.element_size() for t in new.values())
    assert record.tensors == len(new) and record.payload_bytes == payload
    assert record.bytes_moved == 2 * payload and record.buckets > 5
    assert record.peak_bucket_bytes <= max(256 << 10, max(t.nbytes for t in new.values()))
    for url in (a, b):
        assert _differing(url, new) == []
        assert reported_version(url) == "step-1"
        assert _checksums(url)["staged_peak_bytes"] == payload  # staged, then loaded at once
    ref = _samples(d)
    assert _same_samples(_samples(a), ref) and _same_samples(_samples(b), ref)
    assert not _same_samples(before, ref)  # the samples do depend on the weights


def test_a_left_out_or_later_changed_tensor_is_caught_by_the_checksums(env):
    a, b, _ = env["urls"]
    state = _perturbed(2)
    skipped = "model.layers.2.mlp.gate.weight"
    with WeightUpdateGroup([a, b], timeout_s=60) as group:
        group.send(((n, t) for n, t in state.items() if n != skipped), "step-2", 64 << 10)
    assert _differing(a, state) == [skipped] and _differing(b, state) == [skipped]
    state.pop(skipped)
    assert _differing(a, state) == [skipped]  # the replica has it, the sender's dict not
    changed = "model.embed_tokens.weight"
    state[changed][3, 5] += 1e-3  # perturbed after sending
    assert _differing(b, state) == sorted([changed, skipped])


def test_an_unknown_name_is_refused_and_the_old_weights_stay(env):
    a, b, _ = env["urls"]
    old = {n: tensor_checksum(t) for n, t in _perturbed(3).items()}
    with WeightUpdateGroup([a, b], timeout_s=60) as group:
        group.send(_perturbed(3).items(), "step-3", 1 << 30)
    assert _checksums(a)["tensors"] == old and reported_version(a) == "step-3"
    good = list(_perturbed(4).items())
    bad = [*good[:20], ("model.layers.0.mlp.not_a_weight", torch.ones(3)), *good[20:]]
    with WeightUpdateGroup([a, b], timeout_s=60) as group:
        with pytest.raises(WeightSyncError, match="not parameters of this model") as e:
            group.send(bad, "step-4", 64 << 10)  # later buckets than the first: all or nothing
    assert sorted(e.value.urls) == sorted([a, b]) and "not_a_weight [3]" in str(e.value)
    for url in (a, b):
        assert _checksums(url)["tensors"] == old and reported_version(url) == "step-3"
    shape = [*good[:3], ("model.norm.weight", torch.ones(7)), *good[3:]]  # known name, bad shape
    with WeightUpdateGroup([a, b], timeout_s=60) as group:
        with pytest.raises(WeightSyncError, match=r"model.norm.weight \[7\]"):
            group.send(shape, "step-4", 1 << 30)
    assert _checksums(b)["tensors"] == old and reported_version(b) == "step-3"


def test_pipeline_stages_send_over_their_own_groups_and_one_commit_loads_all(env):
    """Two stage leaders (two groups, sending at the same time) with commit=False: nothing is
    loaded until the commit, which loads both stages' tensors at once; without it, nothing."""
    a, b, _ = env["urls"]
    state = _perturbed(6)
    names = sorted(state)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    old = {u: _checksums(u) for u in (a, b)}
    groups = [WeightUpdateGroup([a, b], group_name=f"t1-pp_{i}", timeout_s=60) for i in (0, 1)]
    threads = [threading.Thread(target=g.open) for g in groups]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        records = {}

        def stage(i: int) -> None:
            part = ((n, state[n]) for n in halves[i])
            records[i] = groups[i].send(part, "step-pp", 32 << 10, commit=False)

        threads = [threading.Thread(target=stage, args=(i,)) for i in (0, 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sum(r.tensors for r in records.values()) == len(names)
        for u in (a, b):  # both stages staged, nothing loaded, the version not stamped
            assert _checksums(u)["tensors"] == old[u]["tensors"]
            assert reported_version(u) == old[u]["weight_version"]
        groups[0].commit("step-pp")
        for u in (a, b):
            assert _differing(u, state) == [] and reported_version(u) == "step-pp"
    finally:
        for g in groups:
            g.close()


def test_protocol_errors_are_answered_in_sglangs_shape(env):
    a = env["urls"][0]
    body = {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 2}
    status, out = _post(a, "/init_weights_update_group", body)  # backend defaults to nccl
    assert status == 400 and out["success"] is False and "backend must be gloo" in out["message"]
    body = {"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[64]]}
    status, out = _post(a, "/update_weights_from_distributed", {**body, "group_name": "nope"})
    assert status == 400 and out == {
        "success": False,
        "message": "no weight-update group 'nope' (call /init_weights_update_group)",
    }
    status, out = _post(a, "/destroy_weights_update_group", {"group_name": "nope"})
    assert status == 400 and out["success"] is False
    t0 = time.monotonic()
    with pytest.raises(WeightSyncError, match="backend must be gloo") as e:
        WeightUpdateGroup([a], backend="nccl", timeout_s=20).open()  # the client says it at once
    assert e.value.urls == [a] and time.monotonic() - t0 < 10


def test_a_replica_killed_during_an_update_is_named_and_the_other_keeps_serving(env):
    a = env["urls"][0]
    victim, v_url = _serve(env["root"] / "p0", env["cfg"])
    try:
        kept = {k: v for k, v in _checksums(a).items() if k != "staged_peak_bytes"}
        state = _perturbed(5)
        names = list(state)

        def tensors():
            for i, n in enumerate(names):
                if i == 10:  # the trainer is mid-stream when the replica dies
                    victim.kill()
                    victim.wait()
                yield n, state[n]

        group = WeightUpdateGroup([a, v_url], timeout_s=30)
        group.open()
        t0 = time.monotonic()
        with pytest.raises(WeightSyncError) as e:
            group.send(tensors(), "step-5", 64 << 10)
        group.close()
        assert time.monotonic() - t0 < 25  # reported, not left to the timeout
        assert e.value.urls == [v_url] and v_url in str(e.value)
        now = _checksums(a)
        assert (now["weight_version"], now["tensors"]) == (kept["weight_version"], kept["tensors"])
        assert _same_samples(_samples(a), _samples(a))  # and it serves
        with WeightUpdateGroup([a], timeout_s=60) as group:  # a later update works
            group.send(state.items(), "step-6", 1 << 30)
        assert _differing(a, state) == [] and reported_version(a) == "step-6"
    finally:
        _stop(victim)


def test_generation_waits_for_a_load_and_never_sees_half_the_weights(env):
    """A push of many buckets while another thread samples: every sample equals one taken on
    the old or on the new weights, never a mixture (the load is staged, then gated)."""
    a = env["urls"][0]
    g = torch.Generator().manual_seed(9)
    prompt = torch.randint(0, VOCAB, (6,), generator=g).tolist()
    client = SGLangEngine(a, layers=4, k=2, num_experts=8, timeout_s=120)
    old = client.generate([GenerateRequest(prompt, GREEDY)])[0].output_ids
    seen, stop = [], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.append(client.generate([GenerateRequest(prompt, GREEDY)])[0].output_ids)

    state = _perturbed(7)
    th = threading.Thread(target=sample)
    th.start()
    try:
        with WeightUpdateGroup([a], timeout_s=60) as group:
            group.send(state.items(), "step-7", 8 << 10)
    finally:
        stop.set()
        th.join()
    new = client.generate([GenerateRequest(prompt, GREEDY)])[0].output_ids
    client.close()
    assert new != old and seen and set(map(tuple, seen)) <= {tuple(old), tuple(new)}


def test_fleet_distributed_mode_checks_the_push_and_loads_the_rest_from_disk(env):
    """fleet.weight_update: distributed. The trainer pushed the export to replica a; the
    fleet's before_rollout leaves a alone and loads the export into b, whose version is
    another, from disk (the recovery path). With disk (the default), both read the export."""
    a, b, _ = env["urls"]
    export = env["root"] / "p1"
    version, state = version_of(export), load_policy(export).state_dict()
    with WeightUpdateGroup([a], timeout_s=60) as group:
        group.send(state.items(), version, 1 << 20)
    assert reported_version(a) == version != reported_version(b)
    fleet = Fleet([a, b], layers=4, k=2, num_experts=8, monitor=False, weight_update="distributed")
    try:
        before_rollout(fleet, export)
        assert (fleet.stats.weights_verified, fleet.stats.weight_fallbacks) == (1, 1)
        assert [e["replica"] for e in fleet.events if e["event"] == "weight_fallback"] == [b]
        assert reported_version(a) == reported_version(b) == fleet.version == version
        assert _differing(a, state) == [] and _differing(b, state) == []
        assert _model_path(a) != str(export) == _model_path(b)  # a never read the export
    finally:
        fleet.close()
    disk = Fleet([a, b], layers=4, k=2, num_experts=8, monitor=False)
    try:
        before_rollout(disk, export)
        assert (disk.stats.weights_verified, disk.stats.weight_fallbacks) == (0, 0)
        assert _model_path(a) == str(export) == _model_path(b)
    finally:
        disk.close()
    preset = REPO / "workflow/config/qwen3.5-122b-a10b.yaml"
    with pytest.raises(ConfigError, match=r"weight_update must be disk \| distributed \(got 'nfs'"):
        load_config(preset, {"fleet.weight_update": "nfs"})
    with pytest.raises(ConfigError, match=r"weight_bucket_mb >= 1 \(got 0\)"):
        load_config(preset, {"fleet.weight_bucket_mb": 0})
    assert load_config(preset).fleet.weight_update == "distributed"
    assert load_config(REPO / "workflow/config/tiny.yaml").fleet.weight_update == "disk"
    from_preset = Fleet.from_config(load_config(preset), [a])
    assert from_preset.weight_update == "distributed"
    from_preset.close()


def _model_path(url: str) -> str:
    with urllib.request.urlopen(url + "/get_model_info", timeout=10) as r:
        return json.loads(r.read())["model_path"]


SENDER = """
import sys, torch, torch.distributed as dist
from t1.engine.weight_update import WeightUpdateGroup
from t1.model.policy import load_policy
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[3], rank=0, world_size=1)
state = load_policy(sys.argv[2]).state_dict()
with WeightUpdateGroup([sys.argv[1]], timeout_s=60) as group:
    print(group.send(state.items(), "from-a-trainer", 1 << 20).buckets)
dist.destroy_process_group()
"""


def test_a_sender_with_its_own_default_group(env, tmp_path):
    """A trainer rank already has the default group: the update group lives beside it."""
    a, root = env["urls"][0], env["root"]
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [sys.executable, "-c", SENDER, a, str(root / "p1"), str(port)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert reported_version(a) == "from-a-trainer"
    assert _differing(a, load_policy(root / "p1").state_dict()) == []


def test_bench_weights_moves_both_ways_and_checks_the_replicas(tmp_path):
    """`t1 bench weights` (one replica, one rep): both ways leave the replica holding the
    sender's tensors; the byte counts follow from the payload (timings are not asserted)."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "t1.cli", "bench", "weights", "--replicas", "1", "--reps", "1"]
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    disk, dist_ = res["disk"], res["distributed"]
    assert disk["replicas_hold_the_weights"] and dist_["replicas_hold_the_weights"]
    assert dist_["payload_bytes"] == res["payload_bytes"] == dist_["bytes_moved"]
    assert disk["bytes_moved"] == 2 * disk["bytes_written"] > res["payload_bytes"]
    assert 0 < dist_["peak_bucket_bytes"] <= max(1 << 20, res["payload_bytes"] // 4)
    assert res["ratio_distributed_over_disk_s"] > 0
