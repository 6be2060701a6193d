"""T1 campaign: tasks -> SFT -> critic warm-up -> PPO segments -> evaluation -> report.

    snakemake --profile profiles/local campaign_dense      # tiny MoE on this machine's CPU
    snakemake --profile profiles/slurm campaign_dense \\
        --configfile workflow/config/qwen3.5-122b-a10b.yaml  # on a Slurm cluster
    snakemake --profile profiles/local -n campaign_binary  # dry run: what would run

Targets: campaign_dense, campaign_binary (binary reward ablation), campaign_ablations (the
paper's ablations beside ours: gap, drift, critic warm-up, dense vs binary, SFT vs PPO), critic_warmup,
synthesize, evaluate. Results go to results/<run>/ (run = run.name, or <name>-binary); each
run pins its config in results/<run>/config.yaml. Rules live in workflow/rules/ by stage.
"""

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "workflow/config/tiny.yaml"


envvars:
    "PATH",


validate(config, "workflow/schemas/config.schema.json")


include: "workflow/rules/common.smk"
include: "workflow/rules/tasks.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/sft.smk"
include: "workflow/rules/critic.smk"
include: "workflow/rules/ppo.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/ablations.smk"


campaign.warn_if_pinned_differs(RESULTS, RUNS, config)  # a run keeps its pinned config


rule campaign_dense:
    default_target: True
    input:
        f"{RESULTS}/{NAME}/report.md",
    localrule: True


rule campaign_ablations:
    input:
        f"{RESULTS}/{NAME}/ablations.md",
    localrule: True


rule campaign_binary:
    input:
        f"{RESULTS}/{NAME}-binary/report.md",
    localrule: True


rule critic_warmup:
    input:
        f"{RESULTS}/{NAME}/critic/warmup/DONE.json",
    localrule: True


rule synthesize:
    input:
        f"{RESULTS}/{NAME}/tasks/synth/DONE.json",
    localrule: True


rule evaluate:
    input:
        expand(f"{RESULTS}/{NAME}/eval/{{stage}}/eval.json", stage=["sft", "ppo"]),
    localrule: True
