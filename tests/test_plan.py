"""`t1 segment --dry-run` on the 122B preset: the whole plan, on a fresh checkout (t1/run/plan.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from t1.config import load_config
from t1.engine.allocation import split_allocation
from t1.run.plan import prelaunch_checks, render, replica_memory, segment_plan

REPO = Path(__file__).resolve().parents[1]
PRESET = str(REPO / "workflow/config/qwen3.5-122b-a10b.yaml")
RUN = "results/qwen3.5-122b-a10b"


def _args(config: str = PRESET, iter_: int = 0, **kw) -> argparse.Namespace:
    base = dict(config=config, iter=iter_, run_dir=None, pool=None, tokenizer=None, critic=None)
    base.update(no_measure=True)  # the measured check: test_dry_run_measures_the_preset
    base.update(source=f"{RUN}/sft/model", out=f"{RUN}/ppo/iter_{iter_:05d}/DONE", steps=None)
    base.update(kw)
    return argparse.Namespace(**base)


def _dry_run(tmp_path: Path, *extra: str, measure: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "t1.cli", "segment", "--config", PRESET, "--iter", "1"]
    cmd += ["--from", f"{RUN}/sft/model", "--critic", f"{RUN}/critic/warmup"]
    cmd += ["--out", f"{RUN}/ppo/iter_00001/DONE", "--dry-run", *extra]
    if measure is False:
        cmd.append("--no-measure")
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
    assert lines[s2 + 1] == (  # fleet.weight_update: distributed in the preset
        "  the previous step's trainer pushed the actor to 4 replicas "
        f"(update_weights_from_distributed); {RUN}/ppo/steps/step_000001/train/actor reloads a "
        "replica that missed it"
    )
    # what moving the weights costs per step, the chosen mode first (t1/run/weight_traffic.py)
    w = lines.index(next(x for x in lines if x.startswith("weights to the fleet per step")))
    assert lines[w].startswith("weights to the fleet per step (fleet.weight_update: distributed;")
    assert "4 replicas x 8 ranks" in lines[w]
    assert lines[w + 1].startswith("  distributed (chosen): export written ")
    assert "read back from disk 0.0 GB" in lines[w + 1]
    assert (
        lines[w + 2].startswith("  disk (instead): ") and "over the network 0.0 GB" in lines[w + 2]
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


# ------------------------------------------- the trainer's pre-launch checks in the dry run


def _check_lines(out: str) -> list[str]:
    lines = out.splitlines()
    i = lines.index("checks before launch:")
    j = next(k for k in range(i + 1, len(lines)) if not lines[k].startswith("  "))
    return lines[i + 1 : j]


def test_dry_run_states_what_check_plan_says_of_the_preset(tmp_path):
    from t1.train.megatron.plan import check_plan

    r = _dry_run(tmp_path)
    assert r.returncode == 0, r.stderr
    (line,) = _check_lines(r.stdout)
    assert line.startswith("  memory plan (t1.train.megatron.plan.check_plan")
    try:
        res = check_plan(load_config(PRESET))
    except ValueError as e:  # e.g. a layout the trainer refuses (pipeline parallelism)
        assert f": FAILED: REFUSED: {' '.join(str(e).split())}" in line
    else:
        assert (
            f": OK: fits: actor {res['actor_gib']:.1f} GiB, critic {res['critic_gib']:.1f} " in line
        )
        assert "within train.gpu_budget_gib 95 (megatron)" in line
    assert r.stdout.splitlines()[-1].startswith(f"marker: {RUN}/ppo/iter_00001/DONE")


def test_a_refusal_of_check_plan_is_stated_and_the_plan_still_prints(monkeypatch):
    import t1.train.megatron.plan as P

    def refuse(cfg):
        raise ValueError("train.pipeline_parallel > 1: the trainer does not drive the schedule")

    monkeypatch.setattr(P, "check_plan", refuse)
    plan = segment_plan(_args())
    (check,) = plan["checks"]
    assert check["ok"] is False
    assert check["result"] == (
        "REFUSED: train.pipeline_parallel > 1: the trainer does not drive the schedule"
    )
    text = render(plan)
    assert "check_plan, run by the trainer before launch): FAILED: REFUSED: train.pipeline" in text
    assert text.splitlines()[-1].startswith(f"marker: {RUN}/ppo/iter_00000/DONE")


def test_dry_run_states_fits_or_does_not_fit_with_the_roles_and_the_budget(tmp_path):
    small = load_config(PRESET, {"train.gpu_budget_gib": 1.0})
    (c,) = prelaunch_checks(small, measured=False)
    assert not c["ok"] and c["result"].startswith("DOES NOT FIT (actor ")
    assert "critic " in c["result"] and "over train.gpu_budget_gib 1:" in c["result"]
    (c,) = prelaunch_checks(load_config(REPO / "workflow/config/tiny.yaml"))
    assert c["ok"] and c["result"].startswith("fits: actor ")
    assert "within train.gpu_budget_gib 95 (hf)" in c["result"]


def _preset_checkpoint(d: Path, **text_overrides) -> Path:
    """config.json shaped like the released multimodal checkpoint, with QWEN35_122B's numbers."""
    from t1.model.memory_spec import QWEN35_122B as Q

    text = {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": Q.layers, "hidden_size": Q.hidden,
        "num_attention_heads": Q.heads, "num_key_value_heads": Q.kv_heads,
        "head_dim": Q.head_dim, "moe_intermediate_size": Q.expert_ffn,
        "shared_expert_intermediate_size": 1024, "num_experts": Q.experts,
        "num_experts_per_tok": Q.top_k, "vocab_size": Q.vocab, "max_position_embeddings": 262144,
        "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                        for i in range(Q.layers)],
        "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, **text_overrides,
    }  # fmt: skip
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    return d


def test_dry_run_with_init_from_checks_the_checkpoint_too(tmp_path):
    ck = _preset_checkpoint(tmp_path / "ck", max_position_embeddings=131072)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        Path(PRESET)
        .read_text()
        .replace("  arch: qwen3_5_moe", f"  arch: qwen3_5_moe\n  init_from: {ck}")
    )
    r = _dry_run(tmp_path, "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    spec, mem = _check_lines(r.stdout)
    assert spec.startswith(f"  model.init_from {ck} (t1.model.spec.check): FAILED: 1 disagreement")
    assert "model.max_position = 262144" in spec and "= 131072" in spec
    assert mem.startswith("  memory plan (t1.train.megatron.plan.check_plan")
    assert (
        f"{RUN}/base_model/tokenizer - would read (not there yet; made by rule base_model)"
        in r.stdout
    )
    _preset_checkpoint(tmp_path / "ck")  # the same numbers as the preset: it agrees
    plan = segment_plan(_args(str(cfg)))
    assert plan["checks"][0] == {
        "check": f"model.init_from {ck} (t1.model.spec.check)", "ok": True,
        "result": "agrees with the config",
    }  # fmt: skip
    missing = load_config(PRESET, {"model.init_from": str(tmp_path / "nowhere")})
    spec_c, mem_c = prelaunch_checks(missing, measured=False)
    assert (
        not spec_c["ok"]
        and "cannot read it" in spec_c["result"]
        and "does not exist" in spec_c["result"]
    )
    assert not mem_c["ok"]


@pytest.mark.slow
def test_dry_run_measures_the_preset(tmp_path):
    """The dry run measures the trainer's real models at the preset's layout (fake process
    group): with train.optimizer_offload and Transformer Engine attention it fits 95 GiB, and
    the planner's check beside it agrees within 5%; a smaller budget makes it fail."""
    from t1.run.plan import measured_check

    r = _dry_run(tmp_path, measure=True)
    assert r.returncode == 0, r.stderr
    plan_line, measured = _check_lines(r.stdout)
    assert plan_line.startswith("  memory plan (t1.train.megatron.plan.check_plan")
    assert ": OK: fits: actor " in plan_line
    assert measured.startswith("  measured memory (t1 plan-memory --measure")
    assert ": OK: fits: co-resident peak actor " in measured
    assert "(attention flash, 1 x 65536 tokens)" in measured
    got = float(measured.split("co-resident peak actor ")[1].split(",")[0])
    planned = float(plan_line.split(": OK: fits: actor ")[1].split(" GiB")[0])
    assert got == pytest.approx(planned, rel=0.05) and got <= 95
    c = measured_check(load_config(PRESET, {"train.gpu_budget_gib": got - 1}))
    assert not c["ok"] and c["result"].startswith("DOES NOT FIT: co-resident peak actor ")
