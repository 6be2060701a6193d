"""A campaign that starts from an HF checkpoint (`model.init_from`): the DAG has no tokenizer
or init_policy job; rule base_model (`t1 base-model`) checks the checkpoint against the pinned
config and links its tokenizer and weights, which every downstream rule takes.

    .venv/bin/pytest tests/workflow/test_init_from.py -q
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from t1.config import load_config

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PRESET = "workflow/config/qwen3.5-122b-a10b.yaml"
TARGETS = [
    "campaign_dense", "campaign_binary", "campaign_ablations", "critic_warmup", "synthesize",
    "evaluate",
]  # fmt: skip
# a tiny Qwen3.5-MoE shape: the overlay's model section and the checkpoint's config.json agree
TINY = {"arch": "qwen3_5_moe", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2,
        "head_dim": 16, "expert_intermediate": 32, "experts": 8, "top_k": 2,
        "max_position": 8192, "rope_theta": 10000.0}  # fmt: skip
VOCAB = 320


def write_checkpoint(d: Path, model: dict | None = None, vocab: int = VOCAB) -> Path:
    """An HF-layout Qwen3.5-MoE directory: config.json (text_config nested, as released), an
    index naming two shards (placeholder bytes: nothing here reads weights) and a t1 tokenizer."""
    from t1.agent.tokenizer import train_bpe

    m = {**TINY, **(model or {})}
    d.mkdir(parents=True)
    text = {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": m["layers"],
        "hidden_size": m["hidden"], "num_attention_heads": m["heads"],
        "num_key_value_heads": m["kv_heads"], "head_dim": m["head_dim"],
        "moe_intermediate_size": m["expert_intermediate"], "num_experts": m["experts"],
        "num_experts_per_tok": m["top_k"], "vocab_size": vocab,
        "max_position_embeddings": m["max_position"],
        "rope_parameters": {"rope_theta": m["rope_theta"], "partial_rotary_factor": 0.25},
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                        for i in range(m["layers"])],
    }  # fmt: skip
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a.weight": shards[0], "b.weight": shards[1]}})
    )
    for s in shards:
        (d / s).write_bytes(b"placeholder")
    texts = ["ls -la /tmp && cat file.txt | sort | uniq -c"] * 50
    train_bpe(texts, vocab_size=VOCAB - 20).save_pretrained(d)
    return d


def overlay(tmp_path: Path, ckpt: Path, model: dict | None = None) -> Path:
    f = tmp_path / "init_from.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "model": {**TINY, **(model or {}), "init_from": str(ckpt)},
                "tokenizer": {"kind": "bpe", "vocab_size": VOCAB},
            }  # fmt: skip
        )
    )
    return f


@pytest.fixture(scope="module")
def wf(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wf")
    shutil.copy(REPO / "Snakefile", d)
    shutil.copytree(REPO / "workflow", d / "workflow")
    shutil.copytree(REPO / "profiles", d / "profiles")
    return d


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ck") / "Qwen3.5-tiny")


def snakemake(wf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "snakemake"), *args], cwd=wf, capture_output=True, text=True, timeout=300
    )


def job_counts(out: str) -> dict[str, int]:
    table = out.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def shells(out: str) -> list[str]:
    return [x for x in out.splitlines() if x.startswith("Shell command: ")]


@pytest.mark.parametrize("preset", [False, True])
def test_dry_run_with_init_from_has_no_tokenizer_or_init_policy_job(wf, ckpt, preset):
    files = ["--configfile", PRESET] if preset else []
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", *TARGETS, *files,
                  "--config", f"model={{init_from: {ckpt}}}")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = job_counts(r.stdout)
    assert "tokenizer" not in jobs and "init_policy" not in jobs, jobs
    assert jobs["base_model"] == 1  # the dense run's, shared by its arms like the tokenizer was
    name = "qwen3.5-122b-a10b" if preset else "tiny"
    run = f"results/{name}"
    cmds = shells(r.stdout)
    (check,) = [c for c in cmds if c.startswith("Shell command: t1 base-model ")]
    assert check == (
        f"Shell command: t1 base-model --config {run}/config.yaml --tokenizer-out "
        f"{run}/base_model/tokenizer --out {run}/base_model/policy &> "
        f"{run}/logs/base_model/attempt-1.log"
    )
    # the pinned config records init_from (run_config's --set, as for every --config key)
    pin = [c for c in cmds if f"--out {run}/config.yaml" in c]
    assert pin and f"'--set=model.init_from=\"{ckpt}\"'" in pin[0]
    # every consumer of the tokenizer takes the checkpoint's, the initial policy is its weights
    tok_users = [c for c in cmds if "--tokenizer " in c]
    assert tok_users and all(f"--tokenizer {run}/base_model/tokenizer " in c for c in tok_users)
    assert not any(re.search(rf"{run}/tokenizer\b", c) for c in cmds)
    assert not any("policy/init" in c for c in cmds)
    # what trains first starts from the checkpoint: pre-training (tiny), or SFT where the
    # preset turns pre-training off (pretrain.examples 0: the real checkpoint is pre-trained)
    stage = "--stage sft" if preset else "--stage pretrain"
    (first,) = [c for c in cmds if stage in c]
    assert f"--from {run}/base_model/policy " in first
    assert any("--stage pretrain" in c for c in cmds) != preset


def test_dry_run_with_init_from_and_no_pretraining_starts_sft_from_the_checkpoint(
    wf, ckpt, tmp_path
):
    over = tmp_path / "nopretrain.yaml"
    over.write_text(f"model: {{init_from: {ckpt}}}\npretrain: {{examples: 0}}\n")
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", "campaign_dense",
                  "--configfile", str(over))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pretrain" not in job_counts(r.stdout)
    (sft,) = [c for c in shells(r.stdout) if "--stage sft" in c]
    assert "--from results/tiny/base_model/policy " in sft


def test_an_overlay_file_sets_init_from_too(wf, ckpt, tmp_path):
    over = overlay(tmp_path, ckpt)
    r = snakemake(wf, "--profile", "profiles/slurm", "-n", "-p", "campaign_dense",
                  "--configfile", PRESET, str(over))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = job_counts(r.stdout)
    assert jobs["base_model"] == 1 and "tokenizer" not in jobs and "init_policy" not in jobs
    assert f"--base workflow/config/tiny.yaml {wf / PRESET} {over}" in r.stdout


def test_a_missing_checkpoint_fails_the_dry_run(wf, tmp_path):
    r = snakemake(wf, "--profile", "profiles/local", "-n", "campaign_dense",
                  "--config", f"model={{init_from: {tmp_path / 'nowhere'}}}")  # fmt: skip
    assert r.returncode != 0
    assert f"{tmp_path / 'nowhere'}/config.json" in r.stdout + r.stderr


def test_without_init_from_the_dag_keeps_tokenizer_and_init_policy(wf):
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", "campaign_dense")
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = job_counts(r.stdout)
    assert jobs["tokenizer"] == 1 and jobs["init_policy"] == 1 and "base_model" not in jobs


def test_rule_base_model_checks_pins_and_links(wf, ckpt, tmp_path):
    over = overlay(tmp_path, ckpt)
    target = "results/tiny/base_model/policy"
    r = snakemake(wf, "--cores", "1", target, "--configfile", str(over))
    assert r.returncode == 0, r.stdout + r.stderr
    pinned = load_config(wf / "results/tiny/config.yaml")
    assert pinned.model.init_from == str(ckpt)  # the pinned config records init_from
    policy, tok = wf / target, wf / "results/tiny/base_model/tokenizer"
    assert (
        policy / "model.safetensors.index.json"
    ).resolve() == ckpt / "model.safetensors.index.json"
    assert (policy / "model-00002-of-00002.safetensors").is_symlink()
    assert (tok / "tokenizer.json").resolve() == ckpt / "tokenizer.json"
    assert not (tok / "config.json").exists()  # the tokenizer directory holds no weights
    marker = json.loads((policy / "init_from.json").read_text())
    assert marker["init_from"] == str(ckpt) and marker["shape"]["layers"] == TINY["layers"]
    from t1.agent.tokenizer import load_tokenizer

    assert len(load_tokenizer(tok)) <= VOCAB


def test_t1_base_model_names_every_problem_and_writes_nothing(ckpt, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    (broken / "model-00002-of-00002.safetensors").unlink()
    (broken / "tokenizer_config.json").unlink()
    cfg = overlay(tmp_path, broken, {"experts": 16, "layers": 8})
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "t1.cli", "base-model", "--config", str(cfg),
         "--tokenizer-out", str(out / "tok"), "--out", str(out / "policy")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr
    assert "1 of 2 shards that are missing: model-00002-of-00002.safetensors" in err
    assert "tokenizer_config.json is missing" in err
    assert "model.experts = 16" in err and "num_experts = 8" in err
    assert "model.layers = 8" in err and str(cfg) in err
    assert not out.exists()
    ok = subprocess.run(
        [sys.executable, "-m", "t1.cli", "base-model", "--config", str(overlay(tmp_path, ckpt)),
         "--check-only"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0 and "agrees with" in ok.stdout, ok.stdout + ok.stderr
