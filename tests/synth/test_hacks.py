"""Generic hacks (t1.synth.hacks): a verifier a do-nothing module fools is rejected by validation
and listed by `t1 pool`; an honest one is not. One validation run serves every test here.

    .venv/bin/pytest tests/synth/test_hacks.py -q
"""

from __future__ import annotations

import json

import pytest
from shared_fixtures import requires_bwrap

from t1.synth import draft
from t1.synth.hacks import HACKS, hack_script
from t1.synth.steps import Step
from t1.synth.validate import validate_many
from t1.tasks import load_task
from t1.tasks.agent_imports import AgentImports, agent_imports

SOLUTION = "printf 'def answer():\\n    return 42\\n' > /app/mod.py"
BODIES = {
    # the proxy decides `!=` on the agent's object by identity: an always-equal answer passes
    "weak": "sys.path.insert(0, '/app'); import mod; assert mod.answer() != 0",
    # ... and `==` by identity too: only a real 42 (a value that crosses) equals 42
    "honest": "sys.path.insert(0, '/app'); import mod; assert mod.answer() == 42",
}


def _task(name: str, body: str) -> draft.Draft:
    fn = f"test_s01_{name}"
    step = Step(
        kind="custom",
        category="software-engineering",
        instruction=f"Write /app/mod.py with answer() returning 42 ({name}).",
        solution=SOLUTION,
        tests=f"def {fn}():\n    {body}\n",
        assertions=(fn,),
    )
    return draft.with_step(draft.Draft(id=name, steps=[]), step, 1, origin="test")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("hacks")
    return {k: draft.render(_task(k, b), root / k) for k, b in BODIES.items()}


@pytest.fixture(scope="module")
def validated(rendered):
    rows = validate_many(list(rendered.values()), jobs=2)
    return dict(zip(rendered, rows, strict=True))


def test_static_analysis_finds_the_import_and_where_to_plant(rendered):
    ai = agent_imports(load_task(rendered["weak"]))
    assert ai.writable and ai.modules == ["mod"] and ai.dirs == ["/app"]
    assert ai.targets() == ["/app/mod"]
    script = hack_script(ai, "always-equal")
    assert "__t1_plant /app/mod.py" in script and "/app/mod/__init__.py" in script
    assert set(HACKS) == {"always-equal", "exit-0", "patch-pytest"}
    assert hack_script(AgentImports(files=["/app/x.py"]), "exit-0").count("os._exit(0)") == 1


@requires_bwrap
@pytest.mark.integration
def test_hackable_verifier_is_rejected_and_honest_one_accepted(validated):
    weak, honest = validated["weak"], validated["honest"]
    assert weak["status"] == "rejected", weak["reasons"]
    assert weak["hacks"]["hackable"] == ["always-equal"], weak["hacks"]
    assert any("hackable by always-equal" in r for r in weak["reasons"])
    assert honest["status"] == "accepted", honest["reasons"]
    h = honest["hacks"]
    assert h["applicable"] and h["hackable"] == [] and h["noop_score"] == 0.0
    assert set(h["scores"]) == set(HACKS) and not any(h["scores"].values())


@requires_bwrap
@pytest.mark.integration
def test_pool_lists_hackable_verifiers_with_counts(validated, rendered, tmp_path):
    from t1.curate.pool import build_pool

    oracle = tmp_path / "oracle.json"
    oracle.write_text(json.dumps([
        {"task": k, "resolved": True, "error": None, "total": r["reference"]["total"],
         "assertions": [{"name": n, "outcome": o} for n, o in r["reference"]["outcomes"].items()]}
        for k, r in validated.items()
    ]))  # fmt: skip
    seen = []

    def reuse(task, noop, backend, cache):  # the validation's hack runs, not new sandboxes
        seen.append((task.id, noop))
        return validated[task.id]["hacks"]

    m = build_pool(list(rendered.values()), tmp_path / "pool", validated=[oracle], threshold=1.1,
                   hack_runner=reuse)  # fmt: skip
    assert sorted(seen) == [("honest", None), ("weak", None)]
    assert m["counts"]["imports_agent_code"] == 2 and m["counts"]["hack_checked"] == 2
    assert m["counts"]["hackable"] == 1
    assert [h["id"] for h in m["hackable"]] == ["weak"]
    by_id = {t["id"]: t for t in m["tasks"]}
    assert by_id["weak"]["hackable"] == ["always-equal"] and by_id["honest"]["hackable"] == []
    assert by_id["weak"]["agent_imports"]["modules"] == ["mod"]
    on_disk = json.loads((tmp_path / "pool" / "manifest.json").read_text())
    assert on_disk["counts"]["hackable"] == 1


def test_pool_without_validation_counts_imports_but_runs_no_hacks(rendered, tmp_path):
    from t1.curate.pool import build_pool

    def never(*a, **k):
        raise AssertionError("no hack check without --validated")

    m = build_pool(list(rendered.values()), tmp_path / "pool", threshold=1.1, hack_runner=never)
    assert m["counts"]["imports_agent_code"] == 2 and m["counts"]["hack_checked"] == 0
    assert m["hackable"] == [] and all(t["hackable"] is None for t in m["tasks"])
