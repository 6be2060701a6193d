"""Atomic checkpoints (t1/store/ckpt.py): kill -9 during writes, corruption, retention, formats.

.venv/bin/pytest tests/test_ckpt.py -q
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from t1.rng import capture_rng, restore_rng
from t1.store.ckpt import MANIFEST, MARKER, check, latest_complete, list_step_dirs
from t1.store.ckpt_retention import CheckpointManager, prune
from t1.store.ckpt_write import format_of, write_checkpoint
from t1.store.incidents import read_incidents

REPO = Path(__file__).resolve().parents[1]

# A writer that resumes from the newest complete checkpoint and saves forever; each part's
# content is a function of the step, so a reader can tell a torn checkpoint from a good one.
WRITER = textwrap.dedent(
    """
    import sys
    from t1.store.ckpt import latest_complete
    from t1.store.ckpt_retention import CheckpointManager
    root = sys.argv[1]
    mgr = CheckpointManager(root, keep=2)
    ck = latest_complete(root)
    step = ck.step + 1 if ck else 0
    while True:
        blob = bytes([step % 251]) * (3 << 20)
        mgr.save(step, {"actor": blob, "critic": blob[: 1 << 20],
                        "counters": {"step": step}, "metrics": [step] * 100})
        print(step, flush=True)
        step += 1
    """
)


def _assert_consistent(ckpt) -> None:
    parts = ckpt.load_all()
    assert parts["counters"] == {"step": ckpt.step}
    assert parts["actor"] == bytes([ckpt.step % 251]) * (3 << 20)
    assert parts["critic"] == bytes([ckpt.step % 251]) * (1 << 20)
    assert parts["metrics"] == [ckpt.step] * 100


def test_kill_9_during_writes_always_leaves_a_complete_checkpoint(tmp_path):
    root = tmp_path / "ckpt"
    rng = random.Random(1234)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    newest_seen = -1
    for trial in range(12):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, text=True, env=env
        )
        first = child.stdout.readline()  # one checkpoint finished in this run
        assert first.strip().isdigit(), f"trial {trial}: writer printed {first!r}"
        time.sleep(rng.uniform(0.0, 0.4))
        child.send_signal(signal.SIGKILL)
        printed = [int(first)] + [int(x) for x in child.stdout.read().split()]
        child.wait()
        ckpt = latest_complete(root)
        assert ckpt is not None, f"trial {trial}: no complete checkpoint"
        assert ckpt.step >= printed[-1], (
            f"trial {trial}: {ckpt.step} older than saved {printed[-1]}"
        )
        assert ckpt.step >= newest_seen, (
            f"trial {trial}: went back from {newest_seen} to {ckpt.step}"
        )
        _assert_consistent(ckpt)
        newest_seen = ckpt.step
    # what the kills left behind is at most temp dirs and partial step dirs, never a torn
    # directory that claims to be complete
    for _step, path in list_step_dirs(root):
        status, problems = check(path)
        assert status in ("complete", "partial"), (path, problems)


def _three(tmp_path):
    root = tmp_path / "ckpt"
    for step in (1, 2, 3):
        write_checkpoint(root, step, {"w": bytes([step]) * 1000, "counters": {"step": step}})
    return root


def test_corrupt_newest_is_reported_and_previous_used(tmp_path):
    root = _three(tmp_path)
    part = root / "step_00000003" / "w.bin"
    data = bytearray(part.read_bytes())
    data[500] ^= 0xFF
    part.write_bytes(bytes(data))
    ckpt = latest_complete(root)
    assert ckpt.step == 2
    assert ckpt.load("w") == bytes([2]) * 1000
    (incident,) = read_incidents(root / "incidents.jsonl")
    assert incident["kind"] == "checkpoint_corrupt"
    assert incident["schema_version"] == 1 and incident["status"] == "handled"
    assert "w.bin" in incident["problem"] and "sha256 mismatch" in incident["problem"]
    # the same problem is reported once per process, not at every call
    latest_complete(root)
    assert len(read_incidents(root / "incidents.jsonl")) == 1


@pytest.mark.parametrize(
    "damage, kind, words",
    [
        (lambda d: (d / "w.bin").unlink(), "checkpoint_corrupt", "missing"),
        (lambda d: (d / "w.bin").write_bytes(b"short"), "checkpoint_corrupt", "bytes"),
        (lambda d: (d / MARKER).unlink(), "checkpoint_partial", "marker missing"),
        (lambda d: (d / MANIFEST).write_text("{"), "checkpoint_corrupt", "unreadable"),
        (
            lambda d: (d / MANIFEST).write_text(
                json.dumps({**json.loads((d / MANIFEST).read_text()), "step": 9})
            ),
            "checkpoint_corrupt",
            "sha256 differs",
        ),
    ],
    ids=["missing-file", "truncated-file", "no-marker", "torn-manifest", "edited-manifest"],
)
def test_damaged_newest_is_skipped(tmp_path, damage, kind, words):
    root = _three(tmp_path)
    damage(root / "step_00000003")
    assert latest_complete(root).step == 2
    (incident,) = read_incidents(root / "incidents.jsonl")
    assert incident["kind"] == kind and words in incident["problem"], incident


def test_future_schema_version_is_refused(tmp_path):
    root = tmp_path / "ckpt"
    write_checkpoint(root, 1, {"a": {"x": 1}})
    ck = write_checkpoint(root, 2, {"a": {"x": 2}})
    manifest = json.loads((ck.path / MANIFEST).read_text())
    manifest["schema_version"] = 99
    raw = json.dumps(manifest).encode()
    (ck.path / MANIFEST).write_bytes(raw)
    marker = json.loads((ck.path / MARKER).read_text())
    marker["manifest_sha256"] = __import__("hashlib").sha256(raw).hexdigest()
    (ck.path / MARKER).write_text(json.dumps(marker))
    status, problems = check(ck.path)
    assert status == "corrupt" and "schema_version 99" in problems[0]
    assert latest_complete(root, incidents=tmp_path / "inc.jsonl").step == 1


def test_no_checkpoint_gives_none(tmp_path):
    assert latest_complete(tmp_path / "absent") is None
    (tmp_path / "ckpt" / "step_00000001").mkdir(parents=True)
    assert latest_complete(tmp_path / "ckpt") is None


def test_resaving_a_step_replaces_it(tmp_path):
    root = tmp_path / "ckpt"
    write_checkpoint(root, 5, {"c": {"v": 1}})
    (root / "step_00000006").mkdir()  # a partial one left by a crash
    (root / "step_00000006" / "c.json").write_text("{}")
    write_checkpoint(root, 6, {"c": {"v": 2}})
    assert latest_complete(root).load("c") == {"v": 2}
    write_checkpoint(root, 6, {"c": {"v": 3}})
    assert latest_complete(root).load("c") == {"v": 3}
    prune(root, keep=5)
    assert sorted(p.name for p in root.iterdir()) == ["step_00000005", "step_00000006"]


def test_retention_keeps_last_k_and_cleans_leftovers(tmp_path):
    root = tmp_path / "ckpt"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    (root / f".tmp-step_00000099-{host}-{dead.pid}-abcd").mkdir(parents=True)
    (root / f".tmp-step_00000098-{host}-{os.getpid()}-abcd").mkdir()  # a live writer's
    (root / "step_00000000").mkdir()  # partial, older than the newest complete
    with CheckpointManager(root, keep=2) as mgr:
        for step in range(1, 6):
            mgr.save(step, {"c": {"step": step}})
        assert mgr.wait_retention()
    names = sorted(p.name for p in root.iterdir())
    assert names == [
        f".tmp-step_00000098-{host}-{os.getpid()}-abcd",
        "step_00000004",
        "step_00000005",
    ]


def test_retention_failure_is_recorded_and_the_run_goes_on(tmp_path):
    root = tmp_path / "ckpt"
    mgr = CheckpointManager(root, keep=1)
    real = mgr._prune_once
    calls = []

    def failing_once():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "Input/output error", str(root))
        real()

    mgr._prune_once = failing_once
    mgr.save(1, {"c": {"step": 1}})
    assert mgr.wait_retention()
    mgr.save(2, {"c": {"step": 2}})
    mgr.save(3, {"c": {"step": 3}})
    mgr.close()
    assert [p.name for p in root.glob("step_*")] == ["step_00000003"]
    (incident,) = read_incidents(root / "incidents.jsonl")
    assert incident["kind"] == "retention_failed" and "Input/output error" in incident["error"]


def test_formats_round_trip(tmp_path):
    emb = torch.randn(8, 4)
    model = {
        "embed.weight": emb,
        "lm_head.weight": emb,
        "norm": torch.ones(4)[::2],
    }  # tied, strided
    optim = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))], lr=1e-3)
    optim.param_groups[0]["params"][0].grad = torch.ones(3)
    optim.step()
    parts = {
        "actor": model,
        "actor_optim": optim.state_dict(),
        "data": {"cursor": 17, "epoch": 2, "perm_seed": 1234},
        "oversampling": {"carry": [(3, "task-a")]},  # tuples do not survive JSON
        "metrics": [{"gap": float("nan")}],
        "raw": b"\x00\x01",
    }
    assert [format_of(parts[k]) for k in parts] == [
        "safetensors",
        "torch",
        "json",
        "torch",
        "torch",
        "bytes",
    ]
    ck = write_checkpoint(tmp_path, 1, parts, meta={"run": "t"})
    back = latest_complete(tmp_path).load_all()
    assert torch.equal(back["actor"]["lm_head.weight"], emb) and torch.equal(
        back["actor"]["norm"], torch.ones(2)
    )
    assert back["actor_optim"]["state"][0]["exp_avg"].shape == (3,)
    assert back["data"] == parts["data"] and back["oversampling"] == parts["oversampling"]
    assert back["metrics"][0]["gap"] != back["metrics"][0]["gap"]  # nan kept
    assert back["raw"] == b"\x00\x01" and ck.meta == {"run": "t"}


def test_rng_round_trip(tmp_path):
    np = pytest.importorskip("numpy")
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    write_checkpoint(tmp_path, 1, {"rng": capture_rng()})
    first = (random.random(), torch.rand(3), np.random.rand(3))
    restore_rng(latest_complete(tmp_path).load("rng"))
    again = (random.random(), torch.rand(3), np.random.rand(3))
    assert first[0] == again[0] and torch.equal(first[1], again[1]) and (first[2] == again[2]).all()
