"""`t1 ablations` (t1/eval/ablations.py) on fixture runs written with the real record writers, and
the campaign-wide `t1 tito-audit` it reads (t1/tito/audit.py: several dirs, engine-checked).

    .venv/bin/pytest tests/test_ablations.py -q

Fixture runs: ppo_step events through t1.store.metrics_log.MetricsLog, eval.json documents built
with t1.eval.summary.block (t1 evaluate's figures), summary.json by t1.eval.summary.run_summary,
critic.json by t1.bench.critic.from_metrics over MetricsLog files, drift.json by the real
audit over trajectories saved with t1.agent.trajectory.save_trajectory, gap.json in the document
shape `t1 bench gap` writes (write_json_atomic). Every verdict is shown to go both ways.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from t1.agent.trajectory import Status, Trajectory, Turn, save_trajectory
from t1.bench.critic import from_metrics
from t1.eval import ablations as ab
from t1.eval.ablations_heldout import heldout_row
from t1.eval.ablations_rows import YES, _row, check_filled
from t1.eval.evaluate import SCHEMA_VERSION as EVAL_SCHEMA
from t1.eval.stats import intervals_overlap, two_proportion_test
from t1.eval.summary import block, run_summary
from t1.records import write_json_atomic
from t1.store.metrics_log import MetricsLog
from t1.tito import audit as tito_audit

TRAIN_TASKS = ["t-a", "t-b"]
HELDOUT_TASKS = ["h-a", "h-b"]


# ------------------------------------------------------------------ fixture writers


def _rows(resolved_by_task: dict[str, list[bool]]) -> list[dict]:
    return [
        {"task": t, "resolved": r, "scored": True, "passed": int(r), "total": 1, "reward": float(r),
         "turns": 1, "status": "COMPLETED"}
        for t, runs in resolved_by_task.items() for r in runs
    ]  # fmt: skip


def write_eval(path: Path, resolved_by_task: dict[str, list[bool]]) -> None:
    rows = _rows(resolved_by_task)
    k = 1
    doc = {"schema_version": EVAL_SCHEMA, "status": "complete", "k": k}  # as t1 evaluate's
    write_json_atomic(path, {**doc, "summary": {"overall": block(rows, k)}, "trajectories": rows})


def write_run(
    root: Path,
    name: str,
    resolved_per_step: list[float],
    ev_per_step: list[float | None],
    ppo_eval: dict[str, list[bool]],
    sft_eval: dict[str, list[bool]] | None,
) -> Path:
    run = root / name
    for step, (rate, ev) in enumerate(zip(resolved_per_step, ev_per_step, strict=True)):
        with MetricsLog(run / "ppo/steps" / f"step_{step:06d}" / "train", tensorboard=False) as log:
            log.write("ppo_step", step, resolved_rate=rate, reward_mean=rate / 2,
                      explained_variance=ev, value_loss=0.1, actor_updated=True, rows=8)  # fmt: skip
    write_eval(run / "eval/ppo/eval.json", ppo_eval)
    if sft_eval is not None:
        write_eval(run / "eval/sft/eval.json", sft_eval)
    write_json_atomic(run / "pool/train/manifest.json", {"tasks": [{"id": t} for t in TRAIN_TASKS]})
    every = TRAIN_TASKS + HELDOUT_TASKS
    write_json_atomic(run / "pool/eval/manifest.json", {"tasks": [{"id": t} for t in every]})
    write_json_atomic(run / "summary.json", run_summary(run))
    return run


def write_critic(root: Path, seed: int, warm: list[float | None], cold: list[float | None]) -> Path:
    arms = []
    for arm, evs in (("warm", warm), ("cold", cold)):
        for step, ev in enumerate(evs):
            with MetricsLog(root / f"s{seed}" / arm / f"step_{step}", tensorboard=False) as log:
                log.write("ppo_step", step, explained_variance=ev, value_loss=0.5)
        arms.append(f"{arm}={root / f's{seed}' / arm}")
    path = root / f"seed_{seed}" / "critic.json"
    write_json_atomic(path, {**from_metrics(arms), "config": f"seed {seed}"})
    return path


def write_gap(path: Path, text: float, tito: float, r3: float, n: int = 5) -> Path:
    write_json_atomic(
        path,
        {
            "policy": "sft/model/actor",
            "rollout": "ppo/steps/step_000000/rollout",
            "trajectories": n,
            "turns": 2 * n,
            "tito_errors": 0,
            "a_text_retokenized": {"gap": text, "max": 1.0, "matched_tokens": 90,
                                   "sampled_tokens": 100, "token_drift_rate": 0.1,
                                   "streams_differing_from_tito": 3},
            "b_tito": {"gap": tito, "max": 0.5, "loss_tokens": 100, "routing_differs_rate": 0.03},
            "c_tito_r3": {"gap": r3, "max": 0.05, "loss_tokens": 100, "replay_mismatch": 0},
        },
    )  # fmt: skip
    return path


def save_rollout(out: Path, n: int, engine: bool = True, drift: bool = False) -> None:
    """n one-turn trajectories as `t1 rollout` lays them out (out/trajectories/NNNN-id)."""
    shutil.rmtree(out / "trajectories", ignore_errors=True)
    for i in range(n):
        sampled = [10 + i, 11, 12]
        eng = None if not engine else ([99, 11, 12] if drift else list(sampled))
        turn = Turn([1, 2, 3], sampled, [-0.1, -0.2, -0.3], engine_ids=eng)
        traj = Trajectory(f"task{i}", Status.COMPLETED, turns=[turn], reward=1.0)
        save_trajectory(traj, out / "trajectories" / f"{i:04d}-task{i}")


def write_drift(root: Path, runs: list[Path], drift: bool = False) -> Path:
    # ablations.smk's drift rollout (the SFT policy over the train pool): a root of its own,
    # counted though it lies below the excluded ablations/
    extra = runs[0] / "ablations/drift_rollout"
    save_rollout(extra, 2, drift=drift)
    for run in runs:
        save_rollout(run / "ppo/steps/step_000000/rollout", 2, drift=drift)
        save_rollout(run / "eval/ppo", 1)
        save_rollout(run / "sft/expert", 1)  # a scripted engine's ids: listed, not counted
        save_rollout(run / "old/rollout", 1, engine=False)  # no engine ids: not counted
        save_rollout(run / "ablations/junk", 1, drift=True)  # excluded
    path = root / "drift.json"
    args = ["tito-audit", *map(str, runs), str(extra), "--exclude", "ablations", "--full-json", str(path),
            "--exit-zero"]  # fmt: skip
    parser = argparse.ArgumentParser()
    tito_audit.add_arguments(parser)
    assert tito_audit.main(parser.parse_args(args[1:])) == 0
    return path


@pytest.fixture
def campaign(tmp_path):
    """Three runs where every shape holds, and the measured files; returns the CLI args."""
    res = tmp_path / "results"
    both = {"t-a": [True, False], "t-b": [False, False], "h-a": [True, True], "h-b": [True, True]}
    dense = write_run(res, "tiny", [0.25, 0.5, 0.75], [0.1, 0.2, 0.3],
                      ppo_eval={**both, "h-a": [True] * 20, "h-b": [True] * 20},
                      sft_eval={"t-a": [False, False], "t-b": [False, False],
                                "h-a": [False] * 20, "h-b": [False] * 20})  # fmt: skip
    binary = write_run(res, "tiny-binary", [0.0, 0.0, 0.25], [0.0, 0.1, 0.1],
                       ppo_eval={"t-a": [False, False], "t-b": [False, False], "h-a": [False] * 2},
                       sft_eval=None)  # fmt: skip
    cold = write_run(res, "tiny-cold", [0.25, 0.25, 0.5], [-3.0, -1.0, 0.2],
                     ppo_eval={"t-a": [True, False]}, sft_eval=None)  # fmt: skip
    abl = res / "tiny" / "ablations"
    critic = [write_critic(abl / "critic", s, [0.05, 0.3, 0.6], [-2.0 - s, -0.5, 0.1])
              for s in range(3)]  # fmt: skip
    return {
        "run_dir": dense,
        "binary": binary,
        "cold": cold,
        "gap": write_gap(abl / "gap.json", 0.021, 0.016, 0.013),
        "drift": write_drift(abl, [dense, binary, cold]),
        "critic": critic,
        "out": res / "tiny" / "ablations.md",
    }


def _args(c: dict) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ab.add_arguments(parser)
    argv = ["--run-dir", str(c["run_dir"]), "--binary", str(c["binary"]), "--gap", str(c["gap"]),
            "--drift", str(c["drift"]), "--critic", *map(str, c["critic"]), "--out", str(c["out"])]  # fmt: skip
    if c.get("cold"):
        argv += ["--cold", str(c["cold"])]
    return parser.parse_args(argv)


def _rows_by_key(c: dict) -> dict[str, dict]:
    rows = ab.build(c["run_dir"], c["binary"], c["gap"], c["drift"], c["critic"], c.get("cold"))
    check_filled(rows)
    return {r["key"]: r for r in rows}


# ------------------------------------------------------------------ the table


def test_every_row_is_filled_from_the_measured_files(campaign, capsys):
    assert ab.main(_args(campaign)) == 0
    out = campaign["out"]
    doc = json.loads(out.with_suffix(".json").read_text())
    rows = {r["key"]: r for r in doc["rows"]}
    assert list(rows) == ["gap", "drift", "critic", "reward", "heldout"]
    assert all(r["holds"] == "yes" for r in rows.values()), {k: r["why"] for k, r in rows.items()}
    # (a) the three settings, as written
    assert (
        "(a) text 0.0210, (b) TITO 0.0160, (c) TITO + R3 0.0130 over 5" in rows["gap"]["measured"]
    )
    # (b) 3 runs x (2 PPO + 1 eval) + 2 of the drift rollout engine-checked; expert, no engine
    # ids, the rest of ablations/ not counted
    d = rows["drift"]["data"]
    assert (d["trajectories"], d["loss_tokens"], d["drift_tokens"]) == (11, 33, 0)
    assert d["by_kind"] == {
        "PPO rollouts": 6, "evaluations": 3, "drift rollout": 2, "expert": 3, "other": 0
    }  # fmt: skip
    assert "not counted: 3 expert, 3 without engine ids" in rows["drift"]["measured"]
    assert d["self_checked"] == 3 and "fewer than the 1,000" in rows["drift"]["why"]
    # (c) three seeds: cold opens at -2, -3, -4; mean -3
    c = rows["critic"]["data"]
    assert c["cold_opens_at"] == {"values": [-2.0, -3.0, -4.0], "mean": -3.0, "min": -4.0,
                                  "max": -2.0}  # fmt: skip
    assert (
        "cold opens at -3.000 [-4.000, -2.000], negative 2.0 [2.0, 2.0] of 3"
        in (rows["critic"]["measured"])
    )
    assert c["campaign"]["cold"]["summary"]["opens_at"] == -3.0  # tiny-cold's own curve
    # (d) the curves per step and the final evaluations with their intervals
    r = rows["reward"]["data"]
    assert [p["resolved_rate"] for p in r["curves"]["dense"]] == [0.25, 0.5, 0.75]
    assert [p["resolved_rate"] for p in r["curves"]["binary"]] == [0.0, 0.0, 0.25]
    assert r["final"]["dense"]["resolved"] == 41 and r["final"]["dense"]["trajectories"] == 44
    assert r["final"]["binary"]["resolved"] == 0
    assert r["final"]["sft"]["source"].endswith("tiny/eval/sft/eval.json")  # shared baseline
    assert r["final"]["dense"]["ci95"][0] > r["final"]["binary"]["ci95"][1]
    # (e) held-out: h-a, h-b (not in the train pool): SFT 0/40, PPO 40/40
    h = rows["heldout"]["data"]
    assert (h["sft"]["n"], h["ppo"]["n"]) == (40, 40) and h["intervals_overlap"] is False
    assert h["test"]["p"] < 1e-6
    md = out.read_text()
    assert md.count("| **yes** |") == 5 and "0.0000% over 1,402 samples" in md
    for png in ("ablations_critic.png", "ablations_reward.png"):
        assert (out.parent / png).stat().st_size > 1000 and png in md


def test_every_verdict_can_say_no(campaign):
    abl = campaign["gap"].parent
    write_gap(campaign["gap"], 0.010, 0.011, 0.012)  # R3 + TITO not below text
    runs = [campaign[k] for k in ("run_dir", "binary", "cold")]
    campaign["drift"] = write_drift(abl, runs, drift=True)  # engine ids differ: drift
    campaign["critic"] = [write_critic(abl / "critic2", 0, [-0.1, 0.2, 0.3], [-1.0, 0.1, 0.2])]
    # binary PPO above its baseline; dense PPO below SFT on held-out
    write_eval(campaign["binary"] / "eval/ppo/eval.json", {"t-a": [True] * 40 + [False] * 4})
    write_eval(campaign["run_dir"] / "eval/ppo/eval.json", {"h-a": [False] * 10})
    write_json_atomic(campaign["run_dir"] / "summary.json", run_summary(campaign["run_dir"]))
    rows = _rows_by_key(campaign)
    assert {k: r["holds"] for k, r in rows.items()} == dict.fromkeys(rows, "no")
    assert "(c) 0.0120 >= (a) 0.0100" in rows["gap"]["why"]
    assert rows["drift"]["data"]["errors"] == 8 and "8 errors" in rows["drift"]["why"]
    assert "warm negative 1" in rows["critic"]["why"]
    assert "binary PPO above the SFT baseline (p " in rows["reward"]["why"]
    assert "dense PPO not above binary PPO" in rows["reward"]["why"]
    assert "PPO not above SFT" in rows["heldout"]["why"]


def _heldout_summary(path: Path, sft: int, ppo: int, n: int) -> None:
    """summary.json's held-out split rewritten to SFT sft/n and PPO ppo/n (Wilson intervals)."""
    from t1.eval.stats import wilson_interval

    doc = json.loads(path.read_text())
    for arm, x in (("sft", sft), ("ppo", ppo)):
        doc["heldout"][arm].update(resolved=x / n, n=n, ci95=list(wilson_interval(x, n)))
    path.write_text(json.dumps(doc))


def test_the_heldout_verdict_is_the_two_proportion_test(campaign):
    path = campaign["run_dir"] / "summary.json"
    # +10.9 points of 256 (the committed config's run): the test finds it, the intervals overlap
    _heldout_summary(path, 158, 186, 256)
    row = heldout_row(path)
    assert row["data"]["intervals_overlap"] is True and row["data"]["test"]["p"] < 0.01
    assert row["holds"] == "yes" and "(the 95% intervals overlap)" in row["why"]
    # +9.4 points of 160 (LOG.md, c3): above, but p 0.085
    _heldout_summary(path, 91, 106, 160)
    row = heldout_row(path)
    assert (
        row["holds"] == "no" and row["why"] == "PPO above SFT, but two-proportion p 0.0847 >= 0.05"
    )


def test_the_reward_verdict_tests_both_comparisons(campaign):
    sft = {"h-a": [True] * 220 + [False] * 202}  # 220 of 422, the twenty-ninth session's run
    write_eval(campaign["run_dir"] / "eval/sft/eval.json", sft)
    dense = campaign["run_dir"] / "eval/ppo/eval.json"
    write_eval(dense, {"h-a": [True] * 271 + [False] * 151})
    binary = campaign["binary"] / "eval/ppo/eval.json"
    # binary 3 tasks above SFT (p 0.84): not above it by the test; dense above binary, p < 0.001
    write_eval(binary, {"h-a": [True] * 223 + [False] * 199})
    row = _rows_by_key(campaign)["reward"]
    assert row["holds"] == "yes", row["why"]
    assert (
        row["why"].startswith("dense PPO above binary PPO (p 0.000")
        and "binary PPO above" in row["why"]
    )
    # binary far above SFT: it beat the baseline
    write_eval(binary, {"h-a": [True] * 260 + [False] * 162})
    row = _rows_by_key(campaign)["reward"]
    assert row["holds"] == "no" and row["why"].startswith("binary PPO above the SFT baseline (p ")
    assert "dense PPO above binary PPO, but p" in row["why"]  # 271 against 260: p >= 0.05


def test_undefined_figures_are_not_measurable_with_the_reason(campaign):
    gap = json.loads(campaign["gap"].read_text())
    gap["trajectories"], gap["c_tito_r3"]["gap"] = 0, float("nan")
    write_json_atomic(campaign["gap"], gap)
    abl = campaign["gap"].parent
    campaign["critic"] = [write_critic(abl / "critic3", 0, [None, None], [None, None])]
    # every policy resolves nothing; the eval pool lies inside the train pool: no held-out
    for run in ("run_dir", "binary"):
        write_eval(campaign[run] / "eval/ppo/eval.json", {"t-a": [False] * 4})
    write_eval(campaign["run_dir"] / "eval/sft/eval.json", {"t-a": [False] * 4})
    write_json_atomic(campaign["run_dir"] / "summary.json", run_summary(campaign["run_dir"]))
    rows = _rows_by_key(campaign)
    for key in ("gap", "critic", "reward", "heldout"):
        assert rows[key]["holds"] == "not measurable", (key, rows[key])
    assert "gap undefined (0 trajectories" in rows["gap"]["why"]
    assert "EV undefined at every step" in rows["critic"]["why"]
    assert "all resolve 0.0%" in rows["reward"]["why"]
    assert "heldout.sft: none of the 1 tasks" in rows["heldout"]["why"]


@pytest.mark.parametrize(
    "breaks, names",
    [
        (lambda c: c["gap"].unlink(), "gap.json: missing"),
        (lambda c: c["drift"].write_text(""), "drift.json: empty"),
        (lambda c: c["critic"][1].unlink(), "seed_1/critic.json: missing"),
        (lambda c: (c["run_dir"] / "summary.json").unlink(), "tiny/summary.json: missing"),
        (lambda c: (c["binary"] / "eval/ppo/eval.json").unlink(), "tiny-binary/eval/ppo/eval.json"),
        (lambda c: (c["run_dir"] / "eval/sft/eval.json").unlink(), "tiny/eval/sft/eval.json"),
        (lambda c: (c["binary"] / "ppo/steps/step_000001/train/metrics.jsonl").unlink(),
         "tiny-binary/ppo/steps/step_000001/train/metrics.jsonl: missing"),
        (lambda c: shutil.rmtree(c["cold"] / "ppo"), "tiny-cold/ppo/steps: no PPO step"),
        (lambda c: c["gap"].write_text('{"status": "running"}'), "gap.json: status 'running'"),
        (lambda c: c["gap"].write_text('{"trajectories": 3}'), "gap.json: no a_text_retokenized"),
    ],
)  # fmt: skip
def test_a_missing_or_empty_input_is_an_error_naming_the_file(campaign, capsys, breaks, names):
    breaks(campaign)
    assert ab.main(_args(campaign)) == 2
    err = capsys.readouterr().err
    assert names in err, err
    assert not campaign["out"].exists()


def test_a_heldout_split_of_train_pool_tasks_is_not_measurable(campaign):
    # the eval records name the tasks otherwise than the manifests: summary.json then counts
    # train-pool tasks as held out; the eval pool's manifest shows it
    run = campaign["run_dir"]
    write_json_atomic(run / "pool/eval/manifest.json", {"tasks": [{"id": "t-a"}]})
    row = heldout_row(run / "summary.json")
    assert row["holds"] == "not measurable" and "the split is not held out" in row["why"]
    assert "SFT 0.0% [0.0%, 8.8%] (n 40)" in row["measured"]


def test_the_heldout_row_shows_the_paired_test_beside_its_verdict(campaign):
    path = campaign["run_dir"] / "summary.json"
    before = heldout_row(path)
    doc = json.loads(path.read_text())
    paired = {"tasks": 40, "sft_only": 1, "ppo_only": 9, "p": 0.0215, "test": "exact McNemar"}
    doc["heldout"]["ppo_vs_sft"] = {"paired": paired}
    path.write_text(json.dumps(doc))
    row = heldout_row(path)
    assert "9 resolved by PPO only, 1 by SFT only, exact McNemar p 0.0215" in row["measured"]
    assert row["holds"] == before["holds"] and row["data"]["paired"] == paired


def test_check_filled_names_an_empty_cell():
    row = _row("gap", "(a)", "", YES, "why", ["f"], {})
    with pytest.raises(AssertionError, match="row gap: empty measured"):
        check_filled([row])


def test_two_proportion_test_by_hand():
    # 10/100 vs 20/100: pooled 0.15, se = sqrt(.15 * .85 * .02) = 0.050498, z = 1.9803
    t = two_proportion_test(10, 100, 20, 100)
    assert t["z"] == pytest.approx(1.98030, abs=1e-4)
    assert t["p"] == pytest.approx(0.04767, abs=1e-4)
    assert two_proportion_test(0, 10, 0, 10) == {"z": None, "p": None}
    assert intervals_overlap([0.1, 0.3], [0.3, 0.5]) and not intervals_overlap(
        [0.1, 0.29], [0.3, 0.5]
    )


# ------------------------------------------------------------------ t1 tito-audit, several dirs


def test_audit_of_several_dirs_counts_engine_checked_and_excludes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    save_rollout(a / "ppo/steps/step_000000/rollout", 3)
    save_rollout(b / "eval/ppo", 2)
    save_rollout(b / "sft/expert", 4, engine=False)
    save_rollout(b / "ablations/x", 5, drift=True)
    res = tito_audit.audit_dirs([a, b, a], exclude=("ablations",))  # a twice: counted once
    full = tito_audit.full_summary(res, [str(a), str(b)])
    assert full["trajectories"] == 9 and full["engine_checked"]["trajectories"] == 5
    assert full["self_checked"] == 4 and full["errors"] == []
    assert full["by_dir"][str(a / "ppo/steps/step_000000/rollout")]["engine_checked"] == 3
    assert full["by_dir"][str(b / "sft/expert")] == {
        **tito_audit._counts(),
        "trajectories": 4,
        "loss_tokens": 12,
    }
    # without --exclude, the drifting ones are errors (engine ids differ from the stream's)
    res = tito_audit.audit_dirs([a, b])
    assert len(res["errors"]) == 5 and "drifted loss tokens" in res["errors"][0][1]


def test_audit_cli_exit_status_and_tito_aborts(tmp_path):
    save_rollout(tmp_path / "r", 1, drift=True)
    save_trajectory(
        Trajectory("ab", Status.ABORTED, reason="tito: 1 drifted loss tokens"),
        tmp_path / "r" / "dropped" / "0000-ab",
    )
    parser = argparse.ArgumentParser()
    tito_audit.add_arguments(parser)
    out = tmp_path / "full.json"
    assert tito_audit.main(parser.parse_args([str(tmp_path / "r")])) == 1
    args = parser.parse_args([str(tmp_path / "r"), "--full-json", str(out), "--exit-zero"])
    assert tito_audit.main(args) == 0
    full = json.loads(out.read_text())
    assert len(full["errors"]) == 1 and full["not_trained"] == {"ABORTED": 1}
    assert full["tito_aborted"][0]["reason"].startswith("tito:")
    assert tito_audit.main(parser.parse_args([str(tmp_path / "nope")])) == 2
