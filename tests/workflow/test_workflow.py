"""The campaign workflow: dry runs of every profile, lint, snakefmt, config and schema in step,
rule shape (log + one-line `t1` shell), the segment chain.

    .venv/bin/pytest tests/workflow/test_workflow.py -q
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from t1.config import Config, load_config
from t1.config_schema import json_schema
from t1.run.campaign import derive_config, merge

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TARGETS = [
    "campaign_dense", "campaign_binary", "campaign_ablations", "critic_warmup", "synthesize",
    "evaluate",
]  # fmt: skip
PRESET = "workflow/config/qwen3.5-122b-a10b.yaml"


@pytest.fixture(scope="module")
def wf(tmp_path_factory) -> Path:
    """A copy of the workflow (Snakefile, workflow/, profiles/) to run snakemake in."""
    d = tmp_path_factory.mktemp("wf")
    shutil.copy(REPO / "Snakefile", d)
    shutil.copytree(REPO / "workflow", d / "workflow")
    shutil.copytree(REPO / "profiles", d / "profiles")
    return d


def snakemake(wf: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "snakemake"), *args], cwd=wf, capture_output=True, text=True, timeout=300
    )


def job_counts(out: str) -> dict[str, int]:
    table = out.split("Job stats:")[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


@pytest.mark.parametrize("profile", ["local", "slurm", "slurm-ci"])
def test_dry_run_of_every_target(wf, profile):
    r = snakemake(wf, "--profile", f"profiles/{profile}", "-n", *TARGETS)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = job_counts(r.stdout)
    segments = load_config(wf / "workflow/config/tiny.yaml").campaign.segments
    assert jobs["ppo_segment"] == 3 * segments  # the dense run, its binary and cold-critic arms
    assert jobs["run_config"] == 3 and jobs["synth_tasks"] == 1 and jobs["report"] == 3
    # the arms share the dense run's tasks, tokenizer, SFT and critic warm-up: one of each
    assert jobs["sft"] == 1 and jobs["tokenizer"] == 1 and jobs["warmup_critic"] == 1
    assert jobs["evaluate_policy"] == 4  # the SFT policy once, each run's final PPO policy
    assert jobs["ablations"] == 1


@pytest.mark.parametrize(("n", "workers", "seeds"), [(700, 8, 3), (5, 3, 2)])
def test_the_ablations_keys_reach_their_commands(wf, tmp_path, n, workers, seeds):
    overlay = tmp_path / "abl.yaml"
    overlay.write_text(
        f"ablations: {{drift_trajectories: {n}, drift_workers: {workers}, critic_seeds: {seeds}}}\n"
    )
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", "campaign_ablations",
                  "--configfile", str(overlay))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # the drift rollout: n trajectories of the SFT policy, from a config that decodes in batches
    assert f"--launch {n} --admit {n} --out results/tiny/ablations/drift_rollout" in r.stdout
    assert (
        f"--set run.deterministic=false --set rollout.admission=clock --set rollout.workers={workers} "
        in r.stdout
    )
    assert "t1 rollout --config results/tiny/ablations/drift_config.yaml" in r.stdout
    assert "results/tiny/ablations/drift_rollout --exclude ablations" in r.stdout  # audited
    assert job_counts(r.stdout)["ablation_critic"] == seeds


@pytest.mark.parametrize("n", [0, 100])
def test_critic_warmup_trajectories_reach_the_warmup_rollout(wf, tmp_path, n):
    overlay = tmp_path / "warm.yaml"
    overlay.write_text(f"critic_warmup: {{trajectories: {n}}}\n")
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", "campaign_dense",
                  "--configfile", str(overlay))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "--out results/tiny/critic/rollout" in x)
    # 0: every task of the pool once, all admitted; n: n launched, all admitted
    assert (f"--launch {n} --admit {n} " in line) == bool(n) and ("--launch" in line) == bool(n)
    assert ("--each" in line) == (not n)
    # the pool itself (its seeded order), not its tasks/ dir in rank order
    assert "--tasks results/tiny/pool/train " in line


def _oracle_dirs(stdout: str) -> dict[str, list[str]]:
    """{json file of each `t1 oracle` line: the dirs it checks}."""
    out = {}
    for line in stdout.splitlines():
        line = line.removeprefix("Shell command: ")
        if line.startswith("t1 oracle "):
            words = line.split()
            dirs = words[2 : next(i for i, w in enumerate(words) if w.startswith("--"))]
            out[words[words.index("--json") + 1]] = dirs
    return out


@pytest.mark.parametrize("overlay", [None, "families: {enabled: false}\n", PRESET])
def test_each_task_is_checked_once_per_run(wf, tmp_path, overlay):
    """The eval split checks only the dirs the train split does not; its pool reads both
    splits' rows (`--validated`/`--noop` repeated), the train pool only its own."""
    extra = []
    if overlay == PRESET:
        extra = ["--configfile", PRESET]
    elif overlay:
        (tmp_path / "o.yaml").write_text(overlay)
        extra = ["--configfile", str(tmp_path / "o.yaml")]
    r = snakemake(wf, "--profile", "profiles/local", "-n", "-p", "campaign_dense", *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    checks = _oracle_dirs(r.stdout)
    run = "qwen3.5-122b-a10b" if overlay == PRESET else "tiny"
    v = f"results/{run}/tasks/validate"
    train = checks[f"{v}/oracle_train.json"]
    assert checks[f"{v}/noop_train.json"] == train
    lines = [line.removeprefix("Shell command: ") for line in r.stdout.splitlines()]
    pools = {x.split("--out ")[1].split()[0]: x for x in lines if x.startswith("t1 pool ")}
    eval_pool, train_pool = pools[f"results/{run}/pool/eval"], pools[f"results/{run}/pool/train"]
    assert f"--validated {v}/oracle_train.json --noop {v}/noop_train.json" in train_pool
    assert "_eval.json" not in train_pool
    eval_in = eval_pool.split("--in ")[1].split(" --")[0].split()
    if overlay is None:  # the seed tasks and the families' training instances: checked once
        assert checks[f"{v}/oracle_eval.json"] == [
            "results/tiny/tasks/families/heldout", "results/tiny/tasks/families/heldout_unseen"
        ]  # fmt: skip
    if overlay and overlay != PRESET:  # every eval dir is a train dir: no eval checks at all
        assert f"{v}/oracle_eval.json" not in checks and f"{v}/noop_eval.json" not in checks
        assert "_eval.json" not in eval_pool
    else:
        eval_only = checks[f"{v}/oracle_eval.json"]
        assert checks[f"{v}/noop_eval.json"] == eval_only
        assert not set(eval_only) & set(train)
        assert set(eval_in) <= set(train) | set(eval_only)  # every eval task has its rows
        assert (f"--validated {v}/oracle_train.json --validated {v}/oracle_eval.json "
                f"--noop {v}/noop_train.json --noop {v}/noop_eval.json") in eval_pool  # fmt: skip


def test_dry_run_of_the_122b_preset_on_slurm(wf):
    r = snakemake(
        wf, "--profile", "profiles/slurm", "-n", "-p", "campaign_dense", "--configfile", PRESET
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        job_counts(r.stdout)["ppo_segment"]
        == yaml.safe_load((REPO / PRESET).read_text())["campaign"]["segments"]
    )
    # the preset's settings win over tiny.yaml's (Snakemake's precedence, kept by run_config)
    assert f"--base workflow/config/tiny.yaml {wf / PRESET}" in r.stdout
    assert "--spec workflow/config/qwen3.5-122b-a10b.children.yaml" in r.stdout
    assert "gpu=8" in r.stdout and "nodes=8" in r.stdout  # 4 trainer + 4 SGLang replica nodes


def test_segments_form_a_chain(wf):
    r = snakemake(wf, "-n", "-p", "--cores", "1", "results/tiny/ppo/iter_00001/DONE")
    assert r.returncode == 0, r.stderr
    seg1 = r.stdout.split("output: results/tiny/ppo/iter_00001/DONE")[0].rsplit(
        "rule ppo_segment:", 1
    )[1]
    assert "results/tiny/ppo/iter_00000/DONE" in seg1  # segment 1's input is segment 0's marker
    seg0 = r.stdout.split("output: results/tiny/ppo/iter_00000/DONE")[0].rsplit(
        "rule ppo_segment:", 1
    )[1]
    assert "results/tiny/sft/model/DONE.json" in seg0 and "critic/warmup/DONE.json" in seg0


def test_lint_is_clean(wf):
    r = snakemake(wf, "--lint")
    assert r.returncode == 0 and "Congratulations" in r.stdout + r.stderr, r.stdout + r.stderr


def test_snakefmt_is_clean():
    files = [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]
    r = subprocess.run(
        [str(BIN / "snakefmt"), "--check", *map(str, files)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_schema_file_is_generated_from_the_dataclasses():
    on_disk = json.loads((REPO / "workflow/schemas/config.schema.json").read_text())
    assert on_disk == json_schema(Config), (
        "regenerate: python -m t1.config --schema > workflow/schemas/config.schema.json"
    )


@pytest.mark.parametrize("files", [["tiny.yaml"], ["tiny.yaml", "qwen3.5-122b-a10b.yaml"]])
def test_configs_load_and_validate(files):
    data: dict = {}
    for f in files:
        data = merge(data, yaml.safe_load((REPO / "workflow/config" / f).read_text()))
    schema = json.loads((REPO / "workflow/schemas/config.schema.json").read_text())
    jsonschema.validate(data, schema)
    full = derive_config(data, {}, " + ".join(files))
    jsonschema.validate(full, schema)  # every key spelled out still validates


def test_schema_rejects_an_unknown_key():
    schema = json.loads((REPO / "workflow/schemas/config.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"campaign": {"segmentz": 3}}, schema)


def rule_blocks() -> dict[str, str]:
    out = {}
    for f in (REPO / "workflow/rules").glob("*.smk"):
        for block in re.split(r"(?m)^(?=rule )", f.read_text())[1:]:
            out[block.split(":")[0].split()[1]] = block.split("\n\n\n")[0]
    return out


def test_every_rule_has_a_log_and_one_t1_line():
    blocks = rule_blocks()
    assert len(blocks) >= 12
    for name, block in blocks.items():
        assert "\n    log:\n" in block, f"rule {name}: no log"
        shell = block.split("\n    shell:\n", 1)[1].strip()
        assert shell.count("\n") == 0 and shell.startswith('"') and shell.endswith('"'), (
            f"rule {name}: shell is not one line"
        )
        cmd = shell.strip('"')
        assert cmd.startswith(("t1 ", "python -m t1.")), f"rule {name}: {cmd}"
        assert cmd.endswith("&> {log}"), f"rule {name}: output not sent to the log"


def test_long_jobs_declare_only_marker_files():
    for name in ("synth_tasks", "sft", "warmup_critic", "ppo_segment", "evaluate_policy"):
        block = rule_blocks()[name]
        output = block.split("\n    output:\n", 1)[1].split("\n    log:", 1)[0]
        assert "directory(" not in output and output.count("\n") == 0, (name, output)
        assert re.search(r"/(DONE|DONE\.json|eval\.json)\",", output), (name, output)


def test_run_config_pins_the_binary_run(wf, tmp_path):
    r = snakemake(wf, "--cores", "1", "results/tiny-binary/config.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    pinned = load_config(wf / "results/tiny-binary/config.yaml")
    assert pinned.reward.kind == "binary" and pinned.run.name == "tiny-binary"
    assert pinned.campaign == load_config(wf / "workflow/config/tiny.yaml").campaign
