# Shared helpers for the files in workflow/rules/: config access with the dataclass defaults,
# run names, paths, the pinned per-run config, resources. Included first by the Snakefile.

import json
import os
import shlex
import sys
from pathlib import Path

import yaml

from t1.campaign import derive_config, merge, read_pinned
from t1.config import Config, to_dict

# `t1` and `python` in rule shells are this environment's, activated or not
os.environ["PATH"] = (
    f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
)

DEFAULTS = to_dict(Config())


def conf(dotted):
    """config["a"]["b"] for "a.b", falling back to t1.config's default."""
    node, default = config, DEFAULTS
    for key in dotted.split("."):
        default = default[key]
        node = node.get(key, default) if isinstance(node, dict) else default
    return node


RESULTS = conf("run.results_dir")
NAME = conf("run.name")
# run -> settings on top of the workflow's config (campaign_binary: binary reward)
RUNS = {
    NAME: {"run.name": NAME},
    f"{NAME}-binary": {"run.name": f"{NAME}-binary", "reward.kind": "binary"},
}
SEGMENTS = conf("campaign.segments")
K = conf("campaign.steps_per_segment")
LAST_STEP = SEGMENTS * K - 1


wildcard_constraints:
    run="|".join(RUNS),
    i=r"\d{5}",
    split="train|eval",
    stage="sft|ppo",


def run_dir(run):
    return f"{RESULTS}/{run}"


def pinned(wildcards):
    # ancient: editing a run's pinned config by hand does not rerun what is finished
    return ancient(f"{RESULTS}/{wildcards.run}/config.yaml")


def tokenizer_dir(wildcards):
    return f"{RESULTS}/{wildcards.run}/tokenizer"


def _leaves(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# config files in Snakemake's precedence (the configfile directive's, then --configfile's)
CONFIG_FILES = [
    str(f) for f in workflow.configfiles if f not in workflow.overwrite_configfiles
]
CONFIG_FILES += [str(f) for f in workflow.overwrite_configfiles]
_from_files = {}
for _f in CONFIG_FILES:
    _from_files = merge(_from_files, yaml.safe_load(Path(_f).read_text()) or {})
# what `--config KEY=VALUE` changed on top of the files
CLI_SETS = {
    k: v
    for k, v in _leaves(config).items()
    if _leaves(_from_files).get(k, object()) != v
}


def set_flags(wildcards):
    sets = {**CLI_SETS, **RUNS[wildcards.run]}
    return " ".join(shlex.quote(f"--set={k}={json.dumps(v)}") for k, v in sets.items())


def final_segment(run):
    return f"{RESULTS}/{run}/ppo/iter_{SEGMENTS - 1:05d}/DONE"


def final_policy(run):
    return f"{RESULTS}/{run}/ppo/steps/step_{LAST_STEP:06d}/train/actor"


def warn_if_pinned_differs():
    """A run keeps the config it started with; say so when the workflow's config moved on."""
    for run, sets in RUNS.items():
        path = f"{RESULTS}/{run}/config.yaml"
        old = read_pinned(path)
        if old is not None and old != derive_config(dict(config), sets):
            print(
                f"NOTE: {path} (pinned when the run started) differs from the workflow's "
                "config; the run goes on with its pinned file (delete it to start the run over).",
                file=sys.stderr,
            )


# resources of heavy jobs (portable names; the profile maps them to the site)
GPUS = conf("campaign.gpus")
NODES = conf("campaign.nodes")
CPUS = conf("campaign.cpus")
MEM_MB = conf("campaign.mem_mb")
TRAIN_MIN = conf("campaign.train_minutes")
SEGMENT_MIN = conf("campaign.segment_minutes")
TRAINER_IMAGE = conf("campaign.trainer_image")


# ---------------------------------------------------------------- input functions


def split_dirs(wildcards):
    dirs = list(conf(f"tasks.{wildcards.split}_dirs"))
    if wildcards.split == "train" and conf("campaign.synthesize"):
        # the tasks the audit accepted (instructions repaired); synthesized once, under the
        # dense run, and shared by its ablations (the binary run trains on the same pool)
        dirs.append(f"{RESULTS}/{NAME}/tasks/audit")
    return " ".join(dirs)


def split_inputs(wildcards):
    out = {"cfg": pinned(wildcards)}
    if wildcards.split == "train" and conf("campaign.synthesize"):
        out["audit"] = f"{RESULTS}/{NAME}/tasks/audit/audit.json"
    return out


def segment_inputs(wildcards):
    i = int(wildcards.i)
    out = {"cfg": pinned(wildcards), "tok": tokenizer_dir(wildcards)}
    if i > 0:
        out["prev"] = f"{RESULTS}/{wildcards.run}/ppo/iter_{i - 1:05d}/DONE"
    else:
        out["sft"] = f"{RESULTS}/{wildcards.run}/sft/model/DONE.json"
        if conf("critic_warmup.enabled"):
            out["critic"] = f"{RESULTS}/{wildcards.run}/critic/warmup/DONE.json"
    return out


def critic_flag(wildcards):
    if conf("critic_warmup.enabled"):
        return f"--critic {RESULTS}/{wildcards.run}/critic/warmup"
    return ""


def children_flag(wildcards):
    spec = conf("campaign.children")
    return f"--spec {spec}" if spec else ""


def eval_inputs(wildcards):
    out = {
        "cfg": pinned(wildcards),
        "tok": tokenizer_dir(wildcards),
        "pool": f"{RESULTS}/{wildcards.run}/pool/eval/manifest.json",
    }
    if wildcards.stage == "sft":
        out["policy_done"] = f"{RESULTS}/{wildcards.run}/sft/model/DONE.json"
    else:
        out["policy_done"] = final_segment(wildcards.run)
    return out


def eval_policy(wildcards):
    if wildcards.stage == "sft":
        return f"{RESULTS}/{wildcards.run}/sft/model/actor"
    return final_policy(wildcards.run)
