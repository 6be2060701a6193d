"""ppo.kl_coef: the PPO stage keeps the policy it started from as the reference of a KL term,
records it at step 0, reloads it in every later step (and in a redo of a lost step), and says
what is wrong when it cannot.

    .venv/bin/pytest tests/train/test_ppo_reference.py -q
"""

from __future__ import annotations

import shutil

import pytest
import torch
from test_stages import VOCAB, _args, _config, _rollout

from t1.config import load_config
from t1.model.policy import build_policy, load_policy, save_policy
from t1.store.metrics_log import read_events
from t1.train import cli
from t1.train.megatron.plan import PlanError, check_plan
from t1.train.megatron.stage import open_stage_dir


def _chain(cfg, rollout, source, base, n):
    dirs = [base / f"step{i}" for i in range(n)]
    for i in range(n):
        assert cli.main(_args(cfg, "ppo", rollout, dirs[i - 1] if i else source, dirs[i])) == 0
    return dirs


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppo-reference")
    run = {"deterministic": True, "threads": 1}
    (tmp / "plain").mkdir()
    (tmp / "kl").mkdir()
    plain = _config(tmp / "plain", run=run)
    kl = _config(tmp / "kl", run=run, ppo={"kl_coef": 2.0})
    sft = tmp / "sft"
    save_policy(build_policy(load_config(kl).model, VOCAB, seed=0), sft / "actor")
    rollout = _rollout(kl, sft / "actor", tmp / "rollout")
    return {"tmp": tmp, "plain": plain, "kl": kl, "sft": sft, "rollout": rollout}


def test_the_reference_is_recorded_at_step_0_and_pulls_every_later_step(world):
    tmp, rollout, sft = world["tmp"], world["rollout"], world["sft"]
    kl = _chain(world["kl"], rollout, sft, tmp / "with_kl", 3)
    plain = _chain(world["plain"], rollout, sft, tmp / "plain_chain", 3)
    events = [read_events(d, "ppo_step")[0] for d in kl]
    assert abs(events[0]["kl_ref"]) < 1e-6  # step 0: the actor is the reference
    assert 0 < events[1]["kl_ref"] and 0 < events[2]["kl_ref"]  # later: reloaded, and apart
    assert all("kl_ref" not in read_events(d, "ppo_step")[0] for d in plain)
    progress = open_stage_dir(kl[2], "ppo").load()["progress"]
    assert progress["reference"] == str((sft / "actor").resolve())
    # the option does what it says: the same rollouts give another actor
    a, b = load_policy(kl[2] / "actor").state_dict(), load_policy(plain[2] / "actor").state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_a_reference_that_is_gone_stops_the_step_naming_it(world, capsys):
    tmp, rollout = world["tmp"], world["rollout"]
    sft = tmp / "sft_copy"
    shutil.copytree(world["sft"], sft)
    (first,) = _chain(world["kl"], rollout, sft, tmp / "gone", 1)
    shutil.rmtree(sft)
    assert cli.main(_args(world["kl"], "ppo", rollout, first, tmp / "gone" / "step1")) == 5
    assert f"the reference policy {(sft / 'actor').resolve()} is gone" in capsys.readouterr().out


def test_the_megatron_backend_refuses_a_kl_coef_before_launch(world):
    cfg = load_config(world["kl"], overrides={"train.backend": "megatron"})
    with pytest.raises(PlanError, match="ppo.kl_coef"):
        check_plan(cfg)


def test_a_redo_of_a_lost_step_reloads_the_reference_and_gives_the_same_actor(world):
    # Step 1's checkpoint is corrupt: step 2 redoes step 1 from step 0's state (the fallback
    # chain), which needs the reference recorded at step 0; the result is the unbroken chain's.
    from test_ppo_fallback import _corrupt

    tmp, rollout, cfg = world["tmp"], world["rollout"], world["kl"]
    whole = _chain(cfg, rollout, world["sft"], tmp / "whole", 3)
    broken = _chain(cfg, rollout, world["sft"], tmp / "broken", 2)
    _corrupt(broken[1])
    assert cli.main(_args(cfg, "ppo", rollout, broken[1], tmp / "broken" / "step2")) == 0
    a = load_policy(whole[2] / "actor").state_dict()
    b = load_policy(tmp / "broken" / "step2" / "actor").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_events(tmp / "broken" / "step2", "ppo_step")[0]["kl_ref"] > 0
