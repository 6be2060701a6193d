"""The recursive loop end to end in real sandboxes (small): tasks grow round by round, every
accepted task passes `t1 oracle` and fails the new assertions with `--agent noop`."""

from __future__ import annotations

import json
import shutil

import pytest
from shared_fixtures import requires_bwrap

from t1.store.metrics_log import read_events
from t1.synth import draft
from t1.synth.llm import LLMClient, LLMSynthesizer
from t1.synth.recursive import SynthOptions, run
from t1.tasks import check_task, find_tasks
from t1.verify.oracle import run_task

pytestmark = [pytest.mark.integration, requires_bwrap]


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "run"
    summary = run(SynthOptions(out=out, rounds=2, per_round=3, jobs=2, seed=1))
    return out, summary


def test_run_writes_tasks_table_plot_and_events(synth_run):
    out, summary = synth_run
    assert summary["status"] == "complete" and summary["schema_version"] == 1
    assert json.loads((out / "summary.json").read_text()) == summary
    table = json.loads((out / "rounds.json").read_text())
    assert [r["round"] for r in table] == [0, 1, 2]
    assert "| round | candidates | accepted |" in (out / "rounds.md").read_text()
    assert (out / "rounds.png").stat().st_size > 1000
    tasks = find_tasks([out])
    assert len(tasks) == summary["accepted"] >= 5
    events = list(read_events(out / "metrics.jsonl"))
    cands = [e for e in events if e["event"] == "synth_candidate"]
    assert len(cands) == summary["candidates"]
    assert {e["event"] for e in events} == {"synth_candidate", "synth_round"}
    for t in tasks:
        assert check_task(t) == []
        assert json.loads((t / "validation.json").read_text())["status"] == "accepted"
    assert not (out / "_staging").exists()
    assert json.loads((out / "DONE.json").read_text()) == summary
    assert sorted(p.name for p in (out / "_rejected").iterdir()) == sorted(
        e["task"] for e in cands if e["status"] == "rejected"
    )


def test_difficulty_grows(synth_run):
    _, summary = synth_run
    table = summary["table"]
    for key in ("median_steps", "median_solution_lines", "median_assertions"):
        assert table[0][key] < table[1][key] < table[2][key], key


def test_accepted_tasks_pass_oracle_and_fail_noop_on_new_assertions(synth_run):
    out, _ = synth_run
    last = sorted(out.glob("rst-r02-*"))[:2]
    assert last
    for t in last:
        new = draft.load_draft(t).new_assertions
        ok = run_task(t, agent="oracle")
        assert ok["resolved"] and ok["error"] is None, ok
        noop = run_task(t, agent="noop")
        outcome = {a["name"]: a["outcome"] for a in noop["assertions"]}
        assert new and all(outcome[n] in ("failed", "error") for n in new), outcome


def test_existing_output_is_refused(synth_run):
    out, _ = synth_run
    with pytest.raises(FileExistsError):
        run(SynthOptions(out=out, rounds=0, per_round=1))


def test_model_candidates_go_through_the_same_validation(tmp_path):
    """A stub OpenAI endpoint answers garbage, then a valid step: the first is rejected with a
    reason before any sandbox, the second is validated and accepted; the run completes."""
    from test_llm import VALID, _chat, _Stub

    stub = _Stub([_chat("<<garbage>> {{{"), _chat(json.dumps(VALID))])
    try:
        llm = LLMSynthesizer(LLMClient(stub.url, api="openai", timeout=30))
        summary = run(
            SynthOptions(
                out=tmp_path / "s", rounds=1, per_round=2, jobs=2, seed=3, llm=llm, llm_fraction=1.0
            )
        )
    finally:
        stub.close()
    assert summary["status"] == "complete"
    r1 = [
        e
        for e in read_events(tmp_path / "s" / "metrics.jsonl")
        if e["event"] == "synth_candidate" and e["step"] == 1
    ]
    by_status = {e["status"]: e for e in r1}
    assert set(by_status) == {"accepted", "rejected"}, r1
    assert (
        by_status["rejected"]["reasons"] == ["no JSON object in the response"]
        or "JSON" in by_status["rejected"]["reasons"][0]
    )
    assert by_status["accepted"]["origin"] == "llm"


def test_foreign_seeds_are_extended(tmp_path, repo_root):
    """A v2 task that is not ours (the csv-summary example) seeds the loop: it is validated
    as round 0 and extended in round 1; tasks that cannot be extended are skipped with a reason."""
    src = repo_root / "workflow" / "tasks" / "csv-summary"
    if not src.is_dir():
        pytest.skip("example task csv-summary is not in this checkout")
    seeds = tmp_path / "seeds"
    shutil.copytree(src, seeds / "csv-summary")
    (seeds / "not-a-seed").mkdir()
    summary = run(
        SynthOptions(out=tmp_path / "s", rounds=1, per_round=2, jobs=2, seeds_dir=seeds, seed=5)
    )
    table = summary["table"]
    assert table[0]["accepted"] == 1, table
    assert table[1]["accepted"] >= 1, table
    events = [
        e for e in read_events(tmp_path / "s" / "metrics.jsonl") if e["event"] == "synth_candidate"
    ]
    skipped = [e for e in events if e["task"] == "not-a-seed"]
    assert skipped and skipped[0]["status"] == "rejected" and skipped[0]["reasons"]
    child = next(p for p in (tmp_path / "s").glob("rst-r01-*"))
    assert (src / "tests" / "test_outputs.py").read_text().strip() in (
        child / "tests" / "test_outputs.py"
    ).read_text()


def test_interrupted_run_resumes_without_revalidating(tmp_path):
    out = tmp_path / "s"
    first = run(SynthOptions(out=out, rounds=1, per_round=2, jobs=2, seed=8))
    tasks = sorted(p.name for p in find_tasks([out]))
    # simulate a crash late in round 1: no summary yet, one settled candidate lost
    (out / "DONE.json").unlink()
    (out / "summary.json").unlink()
    lost = sorted(out.glob("rst-r01-*"))[0]
    shutil.rmtree(lost)
    again = run(SynthOptions(out=out, rounds=1, per_round=2, jobs=2, seed=8))
    assert sorted(p.name for p in find_tasks([out])) == tasks
    assert again["accepted"] == first["accepted"]
    events = list(read_events(out / "metrics.jsonl"))
    assert events[0]["event"] == "synth_resume"
    assert (out / "metrics.jsonl.prev0").is_file()
    fresh = [e for e in events if e["event"] == "synth_candidate" and not e.get("reused")]
    assert [e["task"] for e in fresh] == [lost.name]
