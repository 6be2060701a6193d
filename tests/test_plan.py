"""`t1 segment --dry-run` on the 122B preset: the whole plan, on a fresh checkout (t1/run/plan.py)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from t1.config import load_config
from t1.engine.allocation import split_allocation
from t1.run.plan import replica_memory, segment_plan

REPO = Path(__file__).resolve().parents[1]
PRESET = str(REPO / "workflow/config/qwen3.5-122b-a10b.yaml")
RUN = "results/qwen3.5-122b-a10b"


def _args(config: str = PRESET, iter_: int = 0, **kw) -> argparse.Namespace:
    base = dict(config=config, iter=iter_, run_dir=None, pool=None, tokenizer=None, critic=None)
    base.update(source=f"{RUN}/sft/model", out=f"{RUN}/ppo/iter_{iter_:05d}/DONE", steps=None)
    base.update(kw)
    return argparse.Namespace(**base)


def _dry_run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "t1.cli", "segment", "--config", PRESET, "--iter", "1"]
    cmd += ["--from", f"{RUN}/sft/model", "--critic", f"{RUN}/critic/warmup"]
    cmd += ["--out", f"{RUN}/ppo/iter_00001/DONE", "--dry-run", *extra]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}  # no SLURM_* : placeholder nodes
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)


def test_dry_run_prints_the_whole_plan_on_a_fresh_checkout(tmp_path):
    r = _dry_run(tmp_path)  # an empty directory: no pool, no checkpoint, nothing has run
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = out.splitlines()
    sbatch = next(x for x in lines if x.startswith("sbatch: "))
    assert shlex.split(sbatch)[1:11] == [
        "sbatch", "--job-name=t1-ppo-qwen3.5-122b-a10b-00001", "--nodes=8", "--ntasks-per-node=1",
        "--cpus-per-task=64", "--mem=1500000M", "--gpus-per-node=8", "--time=1440", "--requeue",
        "--wrap",
    ]  # fmt: skip
    assert "t1 supervise" in sbatch and "-- t1 segment" in sbatch
    expected = [
        "trainer (megatron): nodes ['node00', 'node01', 'node02', 'node03'], world 32, "
        "rendezvous c10d node00:29500",
        "  ranks 0-7 on node00",
        "  ranks 8-15 on node01",
        "  ranks 16-23 on node02",
        "  ranks 24-31 on node03",
        "  layout TP=2 PP=2 EP=16 ETP=1 DP=8 (expert DP=1), recompute=full, distributed "
        "optimizer=on; fits 95.0 GiB per role",
        "memory per role (GiB per GPU):",
        "  actor: 94.643",
        "  critic: 94.266",
        "  sglang replica: weights 28.43, kv_pool 91.42, static_total 119.85",
        "SGLang replicas: 4",
    ]
    i = lines.index(expected[0])
    assert lines[i : i + len(expected)] == expected
    for r_ in range(4):
        node = f"node0{4 + r_}"
        head = lines.index(f"  replica {r_} on ['{node}'] at http://{node}:30000:")
        srun = shlex.split(lines[head + 1])
        assert srun[:8] == [
            "srun", "--nodes=1", "--ntasks-per-node=1", f"--nodelist={node}",
            "--gpus-per-node=8", f"--job-name=replica{r_}", "--kill-on-bad-exit=1", "python",
        ]  # fmt: skip
        server = srun[srun.index("--") + 1 :]
        assert server[:3] == ["python", "-m", "sglang.launch_server"]
        for flag in ("--enable-return-routed-experts", "--tp-size", "--ep-size"):
            assert flag in server
        assert server[server.index("--model-path") + 1] == f"{RUN}/sft/model/actor"
    router = next(x for x in lines if x.startswith("router: "))
    assert "--worker-urls http://node04:30000 http://node05:30000 http://node06:30000" in router
    # inputs it would read, named though absent
    for what in ("train pool", "tokenizer", "SFT actor", "critic warm-up"):
        line = next(x for x in lines if x.strip().startswith(what))
        assert "would read (not there yet" in line, line
    # per step: weights into the replicas, rollout, the torchrun trainer, checkpoint paths
    s2 = lines.index("step 2:")
    assert (
        lines[s2 + 1]
        == f"  update_weights_from_disk {RUN}/ppo/steps/step_000001/train/actor on 4 replicas"
    )
    train = shlex.split(lines[s2 + 3].split(":", 1)[1])
    assert train[:12] == [
        "srun", "--nodes=4", "--ntasks-per-node=1", "--nodelist=node00,node01,node02,node03",
        "--job-name=trainer", "--kill-on-bad-exit=1", "--gpus-per-node=8", "torchrun",
        "--nnodes=4", "--nproc-per-node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=node00:29500",
    ]  # fmt: skip
    assert train[13:17] == ["-m", "t1.cli", "train", "--config"]
    assert train[train.index("--stage") + 1] == "ppo"
    assert f"  trainer_checkpoint: {RUN}/ppo/steps/step_000002/train/ckpt" in lines
    assert f"  hf_export: {RUN}/ppo/steps/step_000003/train/actor" in lines
    assert lines[-1].startswith(f"marker: {RUN}/ppo/iter_00001/DONE")
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


def test_plan_notes_a_trainer_layout_that_differs_from_the_planner(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(PRESET).read_text().replace("tensor_parallel: 2", "tensor_parallel: 4"))
    plan = segment_plan(_args(str(cfg)))
    assert plan["notes"] and "train.* asks gpus/TP/PP/EP/ETP (32, 4, 2, 16, 1)" in plan["notes"][0]
    assert segment_plan(_args())["notes"] == []


def test_allocation_split_and_its_errors():
    cfg = load_config(PRESET)
    split = split_allocation(cfg, [f"n{i}" for i in range(8)])
    assert split["trainer"] == ["n0", "n1", "n2", "n3"]
    assert [r["url"] for r in split["replicas"]] == [f"http://n{i}:30000" for i in range(4, 8)]
    assert split["router"] == "http://n4:30080"
    with pytest.raises(ValueError, match="leave none for the trainer"):
        split_allocation(cfg, [f"n{i}" for i in range(4)])
    wide = load_config(PRESET, {"fleet.tp": 16, "fleet.replicas": 2})
    split = split_allocation(wide, [f"n{i}" for i in range(8)])
    assert [r["nodes"] for r in split["replicas"]] == [["n4", "n5"], ["n6", "n7"]]
    # more EP shards the experts thinner: the replica's weights shrink, its KV pool grows
    ep1 = replica_memory(load_config(PRESET, {"fleet.ep": 1}))
    assert ep1["weights"] > replica_memory(cfg)["weights"] and ep1["kv_pool"] < 91.42


def test_dry_run_refuses_an_allocation_without_trainer_nodes(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(Path(PRESET).read_text().replace("nodes: 8 ", "nodes: 4 "))
    r = subprocess.run(
        [sys.executable, "-m", "t1.cli", "segment", "--config", str(cfg), "--iter", "0",
         "--from", "sft", "--out", "x/DONE", "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and str(cfg) in r.stderr and "leave none for the trainer" in r.stderr


def test_children_spec_runs_one_watched_replica_per_fleet_replica(tmp_path):
    from t1.supervise.spec import Policy, load_spec

    cfg = load_config(PRESET)
    spec = REPO / cfg.campaign.children
    children = load_spec(spec, ["t1", "segment"], Policy(), {"workdir": "W", "config": PRESET})
    assert [c.name for c in children if c.role == "service"] == [
        f"replica{i}" for i in range(cfg.fleet.replicas)
    ]
    assert all(c.heartbeat == "file" for c in children if c.role == "service")  # /health beats
    # what replica 2 execs inside an allocation of 8 nodes = the plan's line for it
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SLURM_JOB_NODELIST": "n[0-7]"}
    cmd = [sys.executable, *children[2].cmd[1:], "--print"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    if "scontrol" in r.stderr:
        pytest.skip(f"scontrol cannot expand a node list here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    line = shlex.split(r.stdout)
    assert line[:4] == ["srun", "--nodes=1", "--ntasks-per-node=1", "--nodelist=n6"]
    assert line[line.index("--url") + 1] == "http://n6:30000"
    assert line[line.index("--model-path") + 1] == "W/../../sft/model/actor"
