"""t1 audit: static checks by hand values; the sandbox checks on real tasks (integration)."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from shared_fixtures import requires_bwrap

from t1.curate.audit import audit, materialize
from t1.curate.audit_alignment import (
    alignment,
    checked_literals,
    env_text,
    repaired_instruction,
    verifier_literals,
)
from t1.curate.audit_score import ACCEPT, score_row
from t1.synth import draft
from t1.synth.dedup import minhash, nearest, shingles, similarity

TESTS = """
import subprocess
OUT = "/app/out/result.json"

def _helper():
    return "/app/ignored/helper-only"

def test_a():
    r = subprocess.run(["git", "-C", "/app/repo", "log", "--format=%s"], capture_output=True, text=True)
    assert "Release 1.2" in r.stdout
    assert open(OUT).read() == "total 42\\nmax 7\\n"
    code = "import json\\nprint(json.dumps(1))"
    name = f"/app/{OUT}/x"
    assert open("/tmp/scratch.txt").read() == "computed-answer"
"""


def test_literals_keep_checked_values_and_drop_code():
    lits = verifier_literals(TESTS)
    assert "/app/repo" in lits and "/app/out/result.json" in lits
    assert "Release 1.2" in lits and "total 42" in lits and "max 7" in lits
    assert "/app/ignored/helper-only" not in lits  # not in a test or a module constant
    assert not any("import json" in x for x in lits)
    assert "--format=%s" not in lits and "/x" not in lits


def test_checked_literals_need_the_workdir_or_the_solution():
    solution = "git commit -m 'Release 1.2'\npython3 compute.py > /app/out/result.json\n"
    lits = checked_literals(TESTS, "/app", solution)
    assert "/app/repo" in lits and "/app/out/result.json" in lits
    assert "Release 1.2" in lits  # spelled out by the solution: the agent must be told
    assert "total 42" not in lits  # computed: an answer, not a specification
    assert "computed-answer" not in lits and "/tmp/scratch.txt" not in lits


def test_alignment_and_repair():
    lits = ["/app/repo", "/app/out/result.json", "Release 1.2", "north"]
    instruction = "Commit in /app/repo with message `Release 1.2`."
    score, missing = alignment(instruction, lits, env_text="region,north\n")
    assert missing == ["/app/out/result.json"]
    assert score == pytest.approx(0.75)
    fixed = repaired_instruction(instruction, missing)
    assert fixed.startswith(instruction)
    assert alignment(fixed, lits, env_text="region,north\n") == (1.0, [])


def test_minhash_similarity():
    a = shingles("one two three four five six seven eight nine ten " * 3)
    b = shingles("one two three four five six seven eight nine eleven " * 3)
    c = shingles("alpha beta gamma delta epsilon zeta eta theta iota kappa")
    sa, sb, sc = minhash(a), minhash(b), minhash(c)
    assert similarity(sa, sa) == 1.0
    assert similarity(sa, sc) < 0.1
    exact = len(a & b) / len(a | b)
    assert abs(similarity(sa, sb) - exact) < 0.25
    near = nearest([sa, sc, sa])
    assert near[0] == (1.0, 2) and near[2] == (1.0, 0) and near[1][0] < 0.1


def _row(**runs):
    base = {
        "reference": {"passed": 5, "total": 5, "digest": "d1"},
        "reference2": {"passed": 5, "total": 5, "digest": "d1"},
        "noop": {"passed": 1, "total": 5},
        "tamper": {"passed": 1, "total": 5},
        "trivial": {"passed": 1, "total": 5},
    }
    for k, v in runs.items():
        base[k] = {**base[k], **v}
    return {"runs": base, "same_outcomes": True}


def test_score_row_stages():
    good = score_row(_row(), 0.8, "x", [], "", 0.5)
    assert (
        good["stage"] == "accepted" and good["parts"]["verifier"] == 1.0 and good["score"] >= ACCEPT
    )
    assert good["score"] == pytest.approx(0.45 + 0.25 + 0.20 + 0.10 * 0.65)
    broken = score_row(_row(reference={"passed": 4}), 0.8, "x", [], "", 0.5)
    assert broken["stage"] == "rejected" and "reference does not resolve" in broken["reasons"][0]
    noop = score_row(_row(noop={"passed": 5}), 0.8, "x", [], "", 0.5)
    assert noop["stage"] == "rejected" and "no-op resolves" in noop["reasons"][0]
    hacked = score_row(_row(tamper={"passed": 5}), 0.8, "x", [], "", 0.5)
    assert hacked["parts"]["verifier"] == pytest.approx(0.8) and "tampering" in hacked["reasons"][0]
    trivial = score_row(_row(trivial={"passed": 3}), 0.8, "x", [], "", 0.5)
    assert trivial["parts"]["verifier"] == pytest.approx(1 - 0.2 * 2 / 4)
    drift = score_row(_row(reference2={"digest": "d2"}), 0.8, "x", [], "", 0.5)
    assert drift["parts"]["solution"] == 0.5 and "different workdirs" in drift["reasons"][0]
    unaligned = score_row(_row(), 0.8, "x", ["/app/a", "/app/b"], "", 0.5)
    assert unaligned["parts"]["instruction"] == 0.0 and unaligned["missing"] == ["/app/a", "/app/b"]
    assert unaligned["stage"] == "borderline"


@pytest.mark.integration
@requires_bwrap
def test_audit_on_real_tasks(tmp_path):
    rng = random.Random(21)
    seed = draft.seed_draft(rng, 0)
    good = draft.render(draft.extend(seed, rng, 1, 1), tmp_path / "in" / "good")
    # misaligned: the instruction forgets a path the tests check
    mis = draft.render(draft.extend(seed, random.Random(5), 1, 1), tmp_path / "in" / "misaligned")
    checked = checked_literals(
        (mis / "tests/test_outputs.py").read_text(), "/app", (mis / "solution/solve.sh").read_text()
    )
    env = env_text(mis)
    path = max((c for c in checked if c.startswith("/app/") and c not in env), key=len)
    (mis / "instruction.md").write_text(
        (mis / "instruction.md").read_text().replace(path, "the file")
    )
    # trusting: its test.sh runs whatever `python3` the PATH finds. The tampering agent
    # exports a PATH with a fake python3/pytest/uvx; that used to pass such a verifier. The
    # harness now runs every verifier under the sandbox's starting environment (env -i), so
    # the exported PATH never reaches it and the audit finds nothing to flag. (The scoring of
    # a tamper that does pass is pinned by test_score_row_stages above.)
    vul = tmp_path / "in" / "vulnerable"
    shutil.copytree(good, vul)
    sh = (vul / "tests" / "test.sh").read_text()
    assert "export PATH=" in sh and "PY=python3" in sh
    sh = sh.replace("export PATH=", "# export PATH=")
    (vul / "tests" / "test.sh").write_text(sh)
    dirs = [good, mis, vul]
    report = audit(dirs, jobs=2, fresh=True)
    rows = {r["task"]: r for r in report["tasks"]}
    assert report["schema_version"] == 1 and report["status"] == "complete"
    g = rows["good"]
    assert g["parts"]["verifier"] == 1.0 and g["parts"]["solution"] == 1.0, g["reasons"]
    assert g["stage"] == "accepted" and not g["repaired"]
    m = rows["misaligned"]
    assert m["stage_before_repair"] != "rejected" and m["repaired"]
    assert path in m["repaired_instruction"] and m["parts"]["instruction"] == 1.0
    assert m["score"] > m["score_before_repair"]
    v = rows["vulnerable"]
    assert not any("tampering passes" in r for r in v["reasons"]), v["reasons"]
    assert v["parts"]["verifier"] == 1.0
    assert g["novelty"] < 1.0 and g["nearest"] in ("vulnerable", "misaligned")
    n = materialize(report, tmp_path / "out")
    assert n == report["counts"]["after_repair"]["accepted"]
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["counts"] == report["counts"]
    if m["stage"] == "accepted":
        assert path in (tmp_path / "out" / "misaligned" / "instruction.md").read_text()
