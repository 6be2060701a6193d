# Shared helpers for the files in workflow/rules/: config access, run names, paths, input
# functions, resources. Included first by the Snakefile. The config logic (merging, --config
# overrides, runs, the pinned per-run config) lives in t1/run/campaign.py (`t1 run-config`).

import os
import sys
from pathlib import Path

from t1.run import campaign

# `t1` and `python` in rule shells are this environment's, activated or not
os.environ["PATH"] = (
    f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
)


def conf(dotted):
    """config["a"]["b"] for "a.b", falling back to t1.config's default."""
    return campaign.lookup(config, dotted)


RESULTS = conf("run.results_dir")
NAME = conf("run.name")


def _next_log_attempt():
    # one number per snakemake invocation, above every attempt-N.log already there
    found = Path(RESULTS).glob("*/logs/**/attempt-*.log")
    numbers = [
        int(p.stem.split("-")[1]) for p in found if p.stem.split("-")[1].isdigit()
    ]
    return max(numbers, default=0) + 1


# logs go to .../logs/<rule>/attempt-N.log, so a rerun after a crash keeps the crashed
# attempt's log; the jobs of one invocation (Slurm jobs included: they inherit the
# environment) share N
ATTEMPT = os.environ.setdefault("T1_LOG_ATTEMPT", str(_next_log_attempt()))

# run -> settings on top of the workflow's config (campaign_binary: binary reward)
RUNS = campaign.runs(NAME)
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


def provisioned(wildcards):
    # the offline caches, built where the network is (localrule `provision`, tasks.smk)
    # (the linter reads the word for a Snakemake rule plus a colon as a rule definition)
    return f"{RESULTS}/{wildcards.run}/provision/provision.json"


def base(run):
    # the run whose tasks, tokenizer, pre-training, SFT and critic warm-up `run` uses: the
    # ablation arms (NAME-binary, NAME-cold: campaign.runs) change only the PPO segments
    return NAME


def run_conf(run, dotted):
    """A key as `run` sets it (its campaign.runs settings), else the workflow's config."""
    return RUNS[run].get(dotted, conf(dotted))


# model.init_from: an HF checkpoint directory whose tokenizer and weights the campaign starts
# from; rule base_model (model.smk) checks it and links them in place of rules tokenizer and
# init_policy
INIT_FROM = conf("model.init_from")


def tokenizer_of(run):
    if INIT_FROM:
        return f"{RESULTS}/{run}/base_model/tokenizer"
    return f"{RESULTS}/{run}/tokenizer"


def tokenizer_dir(wildcards):
    return tokenizer_of(base(wildcards.run))


def init_policy_of(run):
    if INIT_FROM:
        return f"{RESULTS}/{run}/base_model/policy"
    return f"{RESULTS}/{run}/policy/init"


def init_policy_dir(wildcards):
    return init_policy_of(wildcards.run)


def init_from_config(wildcards):
    # the checkpoint's config.json: a missing or mistyped model.init_from fails the DAG
    return ancient(os.path.join(INIT_FROM, "config.json"))


CONFIG_FILES = campaign.config_files(
    workflow.configfiles, workflow.overwrite_configfiles
)
CLI_SETS = campaign.cli_sets(config, CONFIG_FILES)  # what `--config KEY=VALUE` changed


def set_flags(wildcards):
    return campaign.set_flags({**CLI_SETS, **RUNS[wildcards.run]})


def final_segment(run):
    return f"{RESULTS}/{run}/ppo/iter_{SEGMENTS - 1:05d}/DONE"


def final_policy(run):
    return f"{RESULTS}/{run}/ppo/steps/step_{LAST_STEP:06d}/train/actor"


# resources of heavy jobs (portable names; the profile maps them to the site)
GPUS = conf("campaign.gpus")
NODES = conf("campaign.nodes")
CPUS = conf("campaign.cpus")
# a rollout's threads wait on sandboxes and on the engine (engine.threads computes): they ask
# the job for at most the campaign's CPUs, never one CPU per worker
ROLLOUT_CPUS = min(conf("rollout.workers"), CPUS)


def warmup_size(wildcards):
    """The critic warm-up rollout's size (critic_warmup.trajectories): 0, every task of the
    train pool once, all admitted (`--each`: one epoch over the pool, the paper's warm-up);
    n, n launched through the pool's seeded order, all admitted."""
    n = conf("critic_warmup.trajectories")
    return f"--launch {n} --admit {n}" if n else "--each"


MEM_MB = conf("campaign.mem_mb")
TRAIN_MIN = conf("campaign.train_minutes")
SEGMENT_MIN = conf("campaign.segment_minutes")
TRAINER_IMAGE = conf("campaign.trainer_image")


# ---------------------------------------------------------------- input functions


FAMILIES_DIR = f"{RESULTS}/{NAME}/tasks/families"  # shared by the runs, like synthesis


def family_dirs(split):
    # t1 families: the training instances join the train pool; the eval pool holds the
    # training, the held-out and the unseen-name instances (summary.json splits them: train by
    # train-pool membership, heldout_unseen by FAMILIES_DIR/families.json)
    if not conf("families.enabled"):
        return []
    return [f"{FAMILIES_DIR}/train"] + (
        [f"{FAMILIES_DIR}/heldout", f"{FAMILIES_DIR}/heldout_unseen"]
        if split == "eval"
        else []
    )


def split_dirs(wildcards):
    return " ".join(_split_dir_list(wildcards.split))


def _split_dir_list(split):
    dirs = list(conf(f"tasks.{split}_dirs")) + family_dirs(split)
    if split == "train" and conf("campaign.synthesize"):
        # the tasks the audit accepted (instructions repaired); synthesized once, under the
        # dense run, and shared by its ablations (the binary run trains on the same pool)
        dirs.append(f"{RESULTS}/{NAME}/tasks/audit")
    return dirs


def check_dir_list(split):
    """The dirs whose tasks a split's checks (validate_tasks, noop_tasks) run. The eval split
    leaves out the dirs the train split checks: they hold the same tasks (the seed tasks, the
    families' training instances), and the eval pool reads their rows from the train split's
    files. Each task is checked once per run."""
    dirs = _split_dir_list(split)
    if split == "eval":
        checked = {os.path.normpath(d) for d in _split_dir_list("train")}
        dirs = [d for d in dirs if os.path.normpath(d) not in checked]
    return dirs


def check_dirs(wildcards):
    return " ".join(check_dir_list(wildcards.split))


def check_files(kind):
    """The `t1 oracle --json` files (kind: oracle | noop) the split's pool reads: the train
    split's, and for the eval split also its own when it checks any dir of its own."""

    def files(wildcards):
        out = [f"{RESULTS}/{wildcards.run}/tasks/validate/{kind}_train.json"]
        if wildcards.split == "eval" and check_dir_list("eval"):
            out.append(f"{RESULTS}/{wildcards.run}/tasks/validate/{kind}_eval.json")
        return out

    return files


def families_done(wildcards):
    return [f"{FAMILIES_DIR}/families.json"] if conf("families.enabled") else []


def split_inputs(wildcards):
    out = {"cfg": pinned(wildcards), "provision": provisioned(wildcards)}
    if wildcards.split == "train" and conf("campaign.synthesize"):
        out["audit"] = f"{RESULTS}/{NAME}/tasks/audit/audit.json"
    return out


def sft_start(run):
    # pre-training on the generated corpus (t1 train --stage pretrain) when pretrain.examples > 0
    if conf("pretrain.examples") > 0:
        return f"{RESULTS}/{run}/pretrain/actor"
    return init_policy_of(run)


def sft_start_done(wildcards):
    if conf("pretrain.examples") > 0:
        return f"{RESULTS}/{wildcards.run}/pretrain/DONE.json"
    return init_policy_of(wildcards.run)


def segment_inputs(wildcards):
    i = int(wildcards.i)
    out = {"cfg": pinned(wildcards), "tok": tokenizer_dir(wildcards)}
    b = base(wildcards.run)
    out["pool"] = f"{RESULTS}/{b}/pool/train/manifest.json"
    if i > 0:
        out["prev"] = f"{RESULTS}/{wildcards.run}/ppo/iter_{i - 1:05d}/DONE"
    else:
        out["sft"] = f"{RESULTS}/{b}/sft/model/DONE.json"
        if run_conf(wildcards.run, "critic_warmup.enabled"):
            out["critic"] = f"{RESULTS}/{b}/critic/warmup/DONE.json"
    return out


def critic_flag(wildcards):
    if run_conf(wildcards.run, "critic_warmup.enabled"):
        return f"--critic {RESULTS}/{base(wildcards.run)}/critic/warmup"
    return ""


def children_flag(wildcards):
    spec = conf("campaign.children")
    return f"--spec {spec}" if spec else ""


def eval_inputs(wildcards):
    out = {
        "cfg": pinned(wildcards),
        "tok": tokenizer_dir(wildcards),
        "pool": f"{RESULTS}/{base(wildcards.run)}/pool/eval/manifest.json",
    }
    if wildcards.stage == "sft":
        out["policy_done"] = f"{RESULTS}/{base(wildcards.run)}/sft/model/DONE.json"
    else:
        out["policy_done"] = final_segment(wildcards.run)
    return out


def eval_policy(wildcards):
    if wildcards.stage == "sft":
        return f"{RESULTS}/{base(wildcards.run)}/sft/model/actor"
    return final_policy(wildcards.run)


def report_evals(wildcards):
    # an arm's SFT policy is the dense run's: its evaluation is shared, not repeated
    run = wildcards.run
    return [
        f"{RESULTS}/{base(run)}/eval/sft/eval.json",
        f"{RESULTS}/{run}/eval/ppo/eval.json",
    ]


def shared_flag(wildcards):
    b = base(wildcards.run)
    return "" if b == wildcards.run else f"--shared-run-dir {RESULTS}/{b}"
