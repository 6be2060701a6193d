"""SFT and critic warm-up on train.backend megatron under `torchrun --nproc-per-node 2` (gloo, CPU).

    pytest tests/megatron/test_megatron_stages.py -q

One torchrun launch of stages_worker.py runs every world-size-2 case through the real
`t1 train` (t1.train.cli.main) on the PPO torchrun tests' tiny MoE and trajectories; this
process runs the same stages at world size 1 on both backends. Checked: each step's loss and
the final weights at EP 2 and at DP 2 equal world size 1 megatron (to the fp32 rounding the PPO
torchrun tests allow) and the hf backend; rank 0 alone wrote metrics.jsonl and DONE.json;
a run stopped by --max-steps, and one stopped by a SIGUSR2 that reached rank 1 alone, resume
to the uninterrupted run's weights bit for bit; a checkpoint of another layout (world size 1
at 2, 2 at 1, EP 2 at EP 1) is refused with exit 5. Plus how `t1 train` gets its torchrun world
with train.gpus > 1 (t1/train/launch.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_megatron_trainer import _stage_world

HERE = Path(__file__).parent
STAGES = {"sft": ("sft", "actor", "loss"), "critic": ("critic_warmup", "critic", "value_loss")}
TOL = 2e-5  # the PPO torchrun tests' weight tolerance (fp32 rounding of the reductions)


def _ns(cfg, stage, inputs, source, out, max_steps=None):
    return argparse.Namespace(
        config=str(cfg), stage=stage, inputs=[str(inputs)], source=str(source), out=str(out),
        critic=None, tokenizer=None, max_steps=max_steps, restart_stage=False,
    )  # fmt: skip


def _weights(out: Path, role: str):
    from t1.model.policy import Critic, load_policy

    if role == "actor":
        return load_policy(out / "actor").state_dict()
    return Critic.from_pretrained(out / "critic").state_dict()


def _max_err(a, b) -> float:
    assert set(a) == set(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


def _losses(out: Path, stage: str, key: str) -> list[tuple[int, float]]:
    from t1.store.metrics_log import read_events

    return [(e["step"], e[key]) for e in read_events(out, f"{stage}_step")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """World size 1 (hf, megatron) here, then the one torchrun of stages_worker.py."""
    import cpu_shim

    from t1.train import cli

    cpu_shim.install()
    d = tmp_path_factory.mktemp("stages_torchrun")
    paths, sft, rollout = _stage_world(d)
    base = yaml.safe_load(Path(paths["megatron"]).read_text())
    base["run"]["threads"] = 1
    base["sft"] = {"batch": 2, "epochs": 2, "save_every": 2}
    base["critic_warmup"] = {"batch": 2, "epochs": 2, "save_every": 2}
    cfgs = {
        "hf": {"backend": "hf"},
        "megatron": {"backend": "megatron"},
        "ep2": {"backend": "megatron", "gpus": 2, "expert_parallel": 2},
        "dp2": {"backend": "megatron", "gpus": 2},
    }
    for name, train in cfgs.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump({**base, "train": train}))
    ws1 = {}
    for b in ("hf", "megatron"):
        for name, (stage, _, _) in STAGES.items():
            ws1[b, name] = d / f"ws1_{b}_{name}"
            src = sft / "actor" if stage == "sft" else sft
            assert cli.main(_ns(d / f"{b}.yaml", stage, rollout, src, ws1[b, name])) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # torchrun sets them for its ranks
    # world size 1 stopped after one step, in its own process (this one would hold its lock)
    cmd = [sys.executable, str(HERE / "shimmed_cli.py"), "train", "--stage", "sft", "--config"]
    cmd += [str(d / "megatron.yaml"), "--in", str(rollout), "--from", str(sft / "actor")]
    cmd += ["--out", str(d / "ws1_partial"), "--max-steps", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not (d / "ws1_partial" / "DONE.json").exists()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe), "--nproc-per-node", "2", "--master-port", str(port)]
    cmd += [str(HERE / "stages_worker.py"), "--dir", str(d)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-6000:]
    ranks = [json.loads((d / f"rank_{r}.json").read_text()) for r in (0, 1)]
    return {"d": d, "ws1": ws1, "ranks": ranks, "outs": d / "outs", "sft": sft, "rollout": rollout}


def _rcs(runs, name):
    return [[r["rc"] for r in rank[name]] for rank in runs["ranks"]]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", ["sft", "critic"])
def test_world_size_2_stage_equals_world_size_1_and_hf(runs, name):
    from t1.store.ckpt import list_step_dirs

    stage, role, key = STAGES[name]
    assert _rcs(runs, name) == [[0], [0]]
    got, outs = runs["outs"] / name, {b: runs["ws1"][b, name] for b in ("hf", "megatron")}
    ws2, ws1, hf = (_losses(o, stage, key) for o in (got, outs["megatron"], outs["hf"]))
    assert [s for s, _ in ws2] == [1, 2, 3, 4]  # 2 epochs of 2 minibatches, rank 0 alone wrote
    for (_, a), (_, b), (_, c) in zip(ws2, ws1, hf, strict=True):
        assert abs(a - b) < 1e-6 * max(1.0, abs(b)), (ws2, ws1)
        assert abs(b - c) < 1e-5 * max(1.0, abs(c)), (ws1, hf)
    done = json.loads((got / "DONE.json").read_text())
    assert done["world_size"] == 2 and done["stage"] == stage and done["steps"] == 4
    (_, ckpt), *_ = reversed(list_step_dirs(got / "ckpt"))
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "COMPLETE", "manifest.json", "rank_00000.bin", "rank_00001.bin",
    ]  # fmt: skip
    w = _weights(got, role)
    err1, err_hf = (
        _max_err(w, _weights(outs["megatron"], role)),
        _max_err(w, _weights(outs["hf"], role)),
    )
    print(f"{stage} EP 2 vs world size 1: megatron {err1:.3g}, hf {err_hf:.3g}")
    assert err1 < TOL and err_hf < TOL, (err1, err_hf)
    start = _weights(runs["sft"], "actor") if role == "actor" else None
    if start is not None:  # the guard can fail: training moved the weights well past TOL
        assert _max_err(w, start) > 100 * TOL


@pytest.mark.slow
@pytest.mark.integration
def test_dp2_with_replicated_experts_equals_world_size_1(runs):
    assert _rcs(runs, "sft_dp2") == [[0], [0]]
    got, ws1 = runs["outs"] / "sft_dp2", runs["ws1"]["megatron", "sft"]
    for (_, a), (_, b) in zip(
        _losses(got, "sft", "loss"), _losses(ws1, "sft", "loss"), strict=True
    ):
        assert abs(a - b) < 1e-6 * max(1.0, abs(b))
    assert _max_err(_weights(got, "actor"), _weights(ws1, "actor")) < TOL


@pytest.mark.slow
@pytest.mark.integration
def test_max_steps_then_rerun_resumes_to_the_same_weights(runs):
    assert _rcs(runs, "sft_resume") == [[0, 0], [0, 0]]
    rank0 = runs["ranks"][0]["sft_resume"]
    assert "(per-rank)" in rank0[1]["stdout"] and "at step 1" in rank0[1]["stdout"]
    got, full = runs["outs"] / "sft_resume", runs["outs"] / "sft"
    assert _losses(got, "sft", "loss") == _losses(full, "sft", "loss")  # each step once, equal
    assert _max_err(_weights(got, "actor"), _weights(full, "actor")) == 0.0


@pytest.mark.slow
@pytest.mark.integration
def test_a_signal_to_one_rank_stops_both_at_one_boundary_and_resumes(runs):
    assert _rcs(runs, "critic_stop") == [[75, 0], [75, 0]]  # EXIT_REQUEUE on both, then done
    rank0 = runs["ranks"][0]["critic_stop"]
    assert "at step 1" in rank0[1]["stdout"]
    got, full = runs["outs"] / "critic_stop", runs["outs"] / "critic"
    assert _losses(got, "critic_warmup", "value_loss") == _losses(
        full, "critic_warmup", "value_loss"
    )
    assert _max_err(_weights(got, "critic"), _weights(full, "critic")) == 0.0


@pytest.mark.slow
@pytest.mark.integration
def test_a_checkpoint_of_another_layout_is_refused(runs):
    from t1.train import cli

    for name, says in (
        ("refuse_ws1", "a world-size-1 checkpoint"),
        ("refuse_layout", "resume with the same world size"),
    ):
        assert _rcs(runs, name) == [[5], [5]], name
        assert says in runs["ranks"][0][name][0]["stdout"], runs["ranks"][0][name]
    assert not (runs["d"] / "ws1_partial" / "DONE.json").exists()
    # and the per-rank EP 2 checkpoint back at world size 1
    d = runs["d"]
    out = runs["outs"] / "sft_ep2_partial"
    args = _ns(d / "megatron.yaml", "sft", runs["rollout"], runs["sft"] / "actor", out)
    assert cli.main(args) == 5
    assert not (out / "DONE.json").exists()


# ---------------------------------------------------------------- t1 train's torchrun world


def _cfg(tmp_path, **train):
    from t1.config import load_config

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"train": train, "campaign": {"gpus": 4, "nodes": 2}}))
    return load_config(p)


def test_inside_slurm_the_stage_launches_srun_torchrun_over_the_allocation(tmp_path):
    from t1.train.launch import LaunchError, launch_command, slurm_command, train_argv

    cfg = _cfg(tmp_path, backend="megatron", gpus=8, expert_parallel=2)
    args = _ns("c.yaml", "sft", "in", "pol", "out", max_steps=3)
    argv = train_argv(args)
    assert argv == ["--config", "c.yaml", "--stage", "sft", "--in", "in", "--from", "pol",
                    "--out", "out", "--max-steps", "3"]  # fmt: skip
    cmd = slurm_command(cfg, argv, "sft", ["n1", "n2", "n3"], "42", in_step=True)
    at = cmd.index("torchrun")
    assert cmd[:at] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--nodelist=n1,n2",
                        "--job-name=t1-sft", "--kill-on-bad-exit=1", "--overlap",
                        "--gpus-per-node=4"]  # fmt: skip
    assert cmd[at:] == ["torchrun", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                        "--rdzv-endpoint=n1:29500", "--rdzv-id=t1-sft-42", "-m", "t1.cli",
                        "train", *argv]  # fmt: skip
    with pytest.raises(LaunchError, match="needs 2 whole node"):
        slurm_command(cfg, argv, "sft", ["n1"], "42", in_step=False)
    # already a torchrun rank, one GPU, the hf backend, or ppo: train in this process
    assert launch_command(cfg, args, {"WORLD_SIZE": "8", "SLURM_JOB_ID": "42"}) is None
    for c in (_cfg(tmp_path, backend="megatron", gpus=1), _cfg(tmp_path, backend="hf", gpus=8)):
        assert launch_command(c, args, {}) is None
    assert launch_command(cfg, _ns("c", "ppo", "i", "s", "o"), {}) is None


def test_outside_slurm_and_torchrun_more_than_one_gpu_is_refused_naming_torchrun(
    tmp_path, monkeypatch, capsys
):
    from t1.train import cli

    for k in ("WORLD_SIZE", "RANK", "SLURM_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"train": {"backend": "megatron", "gpus": 2}}))
    (tmp_path / "in").mkdir()
    args = _ns(cfg, "critic_warmup", tmp_path / "in", tmp_path / "sft", tmp_path / "out")
    assert cli.main(args) == 2
    said = capsys.readouterr().out
    assert "torchrun --nproc-per-node 2 -m t1.cli train --config" in said, said
    assert "Slurm allocation" in said and not (tmp_path / "out" / "ckpt").exists()


@pytest.mark.slurm
@pytest.mark.integration
@pytest.mark.slow
def test_in_a_slurm_job_step_t1_train_launches_both_ranks_through_srun_torchrun(tmp_path):
    """The real local Slurm (.ci/slurm/up.sh): `t1 train` in a job step (as Snakemake's Slurm
    executor runs a rule: `srun -n1 ...`) execs srun --overlap + torchrun, and each of the two
    ranks runs `t1 train` (here on a finished stage: it says so and exits 0, no model needed);
    with train.backend hf the same line trains in its own process (one rank)."""
    import time

    from shared_fixtures import slurm_problem

    if (why := slurm_problem()) is not None:
        pytest.skip(f"local Slurm not up: {why}")
    bin_dir = Path(sys.executable).parent
    (tmp_path / "in").mkdir()
    lines = []
    for backend in ("megatron", "hf"):
        cfg = tmp_path / f"{backend}.yaml"
        cfg.write_text(yaml.safe_dump({"train": {"backend": backend, "gpus": 2}}))
        out = tmp_path / f"out_{backend}"
        out.mkdir()
        (out / "DONE.json").write_text(json.dumps({"status": "complete", "stage": "sft"}))
        line = [str(bin_dir / "t1"), "train", "--stage", "sft", "--config", str(cfg)]
        line += ["--in", str(tmp_path / "in"), "--from", str(tmp_path), "--out", str(out)]
        lines.append(f"echo === {backend}; srun -n1 {' '.join(line)}")
    log = tmp_path / "job.log"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    sub = ["sbatch", "--parsable", "-N1", "-n1", "-c2", "--mem=2000M", "-t", "5", "-o", str(log)]
    job = subprocess.run(
        [*sub, "--wrap", " && ".join(lines)], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    end, state = time.time() + 240, ""
    while time.time() < end:
        q = ["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"]
        state = subprocess.run(q, capture_output=True, text=True).stdout.strip()
        if state and state not in ("PENDING", "RUNNING", "REQUEUED"):
            break
        time.sleep(2)
    text = log.read_text()
    assert state == "COMPLETED", (state, text)
    mg, hf = text.split("=== hf")
    assert "t1 train: launching srun --nodes=1" in mg and "--overlap" in mg, mg
    assert "torchrun --nnodes=1 --nproc-per-node=2" in mg, mg
    assert mg.count("DONE.json exists; nothing to do") == 2, mg  # one per rank
    assert "launching" not in hf and hf.count("DONE.json exists; nothing to do") == 1, hf


@pytest.mark.slow
@pytest.mark.integration
def test_each_rank_reads_only_its_share_of_the_starting_weights(runs):
    """`t1 train` on megatron reads each rank's slices of the HF directory (hf_load), never the
    whole model: at EP 2 each rank reads the dense tensors and half of the experts; at DP 2
    (experts replicated) each reads everything - the control that shows the figure can move."""

    def record(name, rank):
        p = runs["outs"] / name / "weights_load" / f"rank_{rank}.json"
        return json.loads(p.read_text())

    for name, role in (("sft", "actor"), ("critic", "critic"), ("sft_dp2", "actor")):
        for rank in (0, 1):
            doc = record(name, rank)
            assert doc["rank"] == rank and doc["world_size"] == 2 and doc["status"] == "complete"
            got = doc["roles"][role]
            assert got["directory"].endswith("actor") and got["tensors_read"] > 0
            frac = got["bytes_read"] / got["checkpoint_bytes"]
            if name == "sft_dp2":
                assert frac == 1.0, (name, rank, got)
            else:
                assert frac < 0.9, (name, rank, got)  # EP 2: half of the experts
    a, b = (record("sft", r)["roles"]["actor"]["bytes_read"] for r in (0, 1))
    assert a == b  # the same share on both ranks (dense + one half of the experts each)
