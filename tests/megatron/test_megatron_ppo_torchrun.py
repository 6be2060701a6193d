"""`t1 train --stage ppo` with train.backend megatron under `torchrun --nproc-per-node 2` (gloo).

    pytest tests/megatron/test_megatron_ppo_torchrun.py -q

The tests' tiny MoE (megatron_helpers.py) and rollout directory (test_megatron_trainer.py), EP 2
on two CPU processes (shimmed_cli.py installs the CPU shim, then runs t1.cli): exit 0, rank 0
alone writes metrics.jsonl / DONE.json / actor / critic, the checkpoint has one file per rank,
the metrics keys are the hf backend's, and the exported weights equal a world-size-1 megatron
run on the same batch to fp32 rounding, which they do not with the gradient reduction off.
A rerun after a crash past the checkpoint resumes it (the step is not redone), and a world-size-1
checkpoint is refused at world size 2 naming it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_megatron_trainer import _args, _stage_world

pytestmark = [pytest.mark.slow, pytest.mark.integration]

HERE = Path(__file__).parent


def torchrun(cfg, rollout, source, out, **env) -> subprocess.CompletedProcess:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe), "--nproc-per-node", "2", "--master-port", str(port)]
    cmd += [str(HERE / "shimmed_cli.py"), "train", "--stage", "ppo", "--config", str(cfg)]
    cmd += ["--in", str(rollout), "--from", str(source), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **env)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # torchrun sets them for its ranks
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def _weights(out: Path):
    from t1.model.policy import Critic, load_policy

    return {
        "actor": load_policy(out / "actor").state_dict(),
        "critic": Critic.from_pretrained(out / "critic").state_dict(),
    }


def _max_err(a, b) -> float:
    return max((a[k][n] - b[k][n]).abs().max().item() for k in a for n in a[k])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Outputs of: hf and megatron at world size 1 (in this process), EP 2 under torchrun."""
    import cpu_shim

    from t1.train import cli

    cpu_shim.install()
    tmp = tmp_path_factory.mktemp("ppo_torchrun")
    paths, sft, rollout = _stage_world(tmp)
    data = yaml.safe_load(Path(paths["megatron"]).read_text())
    ep2 = tmp / "ep2.yaml"
    ep2.write_text(
        yaml.safe_dump({**data, "train": {"backend": "megatron", "gpus": 2, "expert_parallel": 2}})
    )
    outs = {b: tmp / f"ws1_{b}" for b in ("hf", "megatron")}
    for b, out in outs.items():
        assert cli.main(_args(paths[b], rollout, sft, out)) == 0
    outs["ep2"] = tmp / "ep2"
    p = torchrun(ep2, rollout, sft, outs["ep2"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return {"outs": outs, "ep2": ep2, "sft": sft, "rollout": rollout, "tmp": tmp}


def test_ep2_stage_writes_once_and_equals_world_size_1(runs):
    from t1.store.ckpt import list_step_dirs
    from t1.store.metrics_log import read_events

    outs = runs["outs"]
    ev = {b: read_events(outs[b], "ppo_step") for b in outs}
    assert [len(e) for e in ev.values()] == [1, 1, 1]  # rank 0 alone wrote metrics.jsonl
    assert set(ev["ep2"][0]) == set(ev["hf"][0])
    for k in ("policy_loss", "value_loss"):
        assert abs(ev["ep2"][0][k] - ev["megatron"][0][k]) < 1e-6, k
    done = json.loads((outs["ep2"] / "DONE.json").read_text())
    assert done["world_size"] == 2 and done["step"] == 0
    (_, ckpt), *_ = list_step_dirs(outs["ep2"] / "ckpt")
    names = sorted(p.name for p in ckpt.iterdir())
    assert names == ["COMPLETE", "manifest.json", "rank_00000.bin", "rank_00001.bin"]
    err = _max_err(_weights(outs["megatron"]), _weights(outs["ep2"]))
    print(f"EP 2 stage vs world size 1: max weight error {err:.3g}")
    assert err < 2e-5, err


def test_without_gradient_reduction_the_ep2_stage_parts_from_world_size_1(runs):
    """The guard above can fail: each rank stepping on its own rows' gradients."""
    out = runs["tmp"] / "ep2_no_reduce"
    p = torchrun(runs["ep2"], runs["rollout"], runs["sft"], out, T1_TEST_NO_REDUCE="1")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    err = _max_err(_weights(runs["outs"]["megatron"]), _weights(out))
    print(f"EP 2 stage without gradient reduction vs world size 1: max weight error {err:.3g}")
    assert err > 1e-4, err


def test_rerun_resumes_the_per_rank_checkpoint_without_redoing_the_step(runs):
    from t1.store.metrics_log import read_events

    out = runs["outs"]["ep2"]
    before = _weights(out)
    (out / "DONE.json").unlink()  # a crash after the checkpoint, before DONE.json
    p = torchrun(runs["ep2"], runs["rollout"], runs["sft"], out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert "(per-rank)" in p.stdout
    assert json.loads((out / "DONE.json").read_text())["resumed"] is True
    assert len(read_events(out, "ppo_step")) == 1  # the step was not redone
    assert _max_err(before, _weights(out)) == 0.0  # re-exported from the checkpoint, exactly


def test_a_world_size_1_checkpoint_is_refused_at_world_size_2(runs):
    from t1.store.lock import release_output

    out = runs["outs"]["megatron"]
    (out / "DONE.json").unlink()
    # the world-size-1 stage ran in this process, which holds its output's lock until it exits:
    # give it up, or rank 0 stops at the lock and only rank 1 (if torchrun lets it print
    # before tearing it down) names the layout
    assert release_output(out)
    p = torchrun(runs["ep2"], runs["rollout"], runs["sft"], out)
    assert p.returncode != 0
    assert "another writer" not in p.stdout, p.stdout
    assert "a world-size-1 checkpoint" in p.stdout and "no resharding" in p.stdout, p.stdout
    assert not (out / "DONE.json").exists()
