# Ablations (issue 14 item 4): the paper's ablation figures measured on this campaign's runs,
# one table. `snakemake --profile profiles/local campaign_ablations` finishes the three runs
# of campaign.runs() (RUNS, common.smk) - NAME (dense reward, warm critic, TITO + R3),
# NAME-binary (binary reward), NAME-cold (critic_warmup.enabled false) - then measures:
#   ablations/gap.json                 t1 bench gap on NAME's step-0 rollout, with NAME's SFT actor
#   ablations/drift_rollout/           t1 rollout: ablations.drift_trajectories trajectories of
#                                      NAME's SFT policy over the train pool, for the audit,
#                                      decoded in batches (drift_config.yaml: run.deterministic
#                                      off, ablations.drift_workers workers)
#   ablations/drift.json               t1 tito-audit over every trajectory of the three runs
#                                      and of the drift rollout
#   ablations/critic/seed_S/...        t1 bench critic: warm vs cold critic on NAME's PPO
#                                      rollouts (the same batches), one run per seed S
# and `t1 ablations` (t1/eval/ablations.py) writes RESULTS/NAME/ablations.md and .json (one row per
# ablation, (d) and (e) read from the runs' metrics.jsonl, eval.json and summary.json) and
# the two PNGs beside them. The target `campaign_ablations` (its input: ablations.md) is in the
# Snakefile, with the other targets.

ABL_DIR = f"{RESULTS}/{NAME}/ablations"
ABL_RUNS = {"dense": NAME, "binary": f"{NAME}-binary", "cold": f"{NAME}-cold"}
# seeds of the critic comparison: run.seed + i (the trainer's minibatch shuffle, the cold
# arm's fresh value head); the batches stay the same
CRITIC_SEEDS = [conf("run.seed") + i for i in range(conf("ablations.critic_seeds"))]
# the dense run's PPO rollouts, one per step: the batches both critics train on
ABL_ROLLOUTS = " ".join(
    f"{RESULTS}/{NAME}/ppo/steps/step_{s:06d}/rollout" for s in range(LAST_STEP + 1)
)


rule ablation_gap:
    input:
        cfg=ancient(f"{RESULTS}/{NAME}/config.yaml"),
        tok=tokenizer_of(NAME),
        sft=f"{RESULTS}/{NAME}/sft/model/DONE.json",
        step0=f"{RESULTS}/{NAME}/ppo/iter_00000/DONE",
    output:
        f"{ABL_DIR}/gap.json",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/gap/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: CPUS
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
    params:
        rollout=lambda w: f"{RESULTS}/{NAME}/ppo/steps/step_000000/rollout",
        policy=lambda w: f"{RESULTS}/{NAME}/sft/model/actor",
    shell:
        "t1 bench gap --config {input.cfg} --rollout {params.rollout} --policy {params.policy} --tokenizer {input.tok} --json {output} &> {log}"


rule ablation_drift_config:
    input:
        cfg=ancient(f"{RESULTS}/{NAME}/config.yaml"),
    output:
        f"{ABL_DIR}/drift_config.yaml",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/drift_config/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        workers=conf("ablations.drift_workers"),
    shell:
        "t1 run-config --base {input.cfg} --set run.deterministic=false --set rollout.admission=clock --set rollout.workers={params.workers} --out {output} &> {log}"


rule ablation_drift_rollout:
    input:
        cfg=rules.ablation_drift_config.output,
        tok=tokenizer_of(NAME),
        pool=f"{RESULTS}/{NAME}/pool/train/manifest.json",
        sft=f"{RESULTS}/{NAME}/sft/model/DONE.json",
    output:
        f"{ABL_DIR}/drift_rollout/rollout.json",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/drift_rollout/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: min(conf("ablations.drift_workers"), CPUS)  # its config: rollout.workers = that
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
        nodes=NODES,
        gpu=GPUS,
    params:
        n=conf("ablations.drift_trajectories"),
        policy=lambda w: f"{RESULTS}/{NAME}/sft/model/actor",
        pool=lambda w: f"{RESULTS}/{NAME}/pool/train/tasks",
        out=lambda w: f"{ABL_DIR}/drift_rollout",
    shell:
        "t1 rollout --config {input.cfg} --policy {params.policy} --tokenizer {input.tok} --tasks {params.pool} --launch {params.n} --admit {params.n} --out {params.out} &> {log}"


rule ablation_drift:
    input:
        # a run's report needs its last PPO segment and its evaluations: every trajectory
        reports=[f"{RESULTS}/{run}/report.md" for run in ABL_RUNS.values()],
        rollout=rules.ablation_drift_rollout.output,
    output:
        f"{ABL_DIR}/drift.json",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/drift/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
    params:
        dirs=lambda w: " ".join(
            [f"{RESULTS}/{run}" for run in ABL_RUNS.values()]
            + [f"{ABL_DIR}/drift_rollout"]
        ),
    shell:
        "t1 tito-audit {params.dirs} --exclude ablations --full-json {output} --exit-zero &> {log}"


rule ablation_critic_config:
    input:
        cfg=ancient(f"{RESULTS}/{NAME}/config.yaml"),
    output:
        f"{ABL_DIR}/critic/seed_{{seed}}/config.yaml",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/critic_config_{{seed}}/attempt-{ATTEMPT}.log",
    wildcard_constraints:
        seed=r"\d+",
    localrule: True
    container:
        TRAINER_IMAGE
    shell:
        "t1 run-config --base {input.cfg} --set run.seed={wildcards.seed} --out {output} &> {log}"


rule ablation_critic:
    input:
        cfg=f"{ABL_DIR}/critic/seed_{{seed}}/config.yaml",
        tok=tokenizer_of(NAME),
        sft=f"{RESULTS}/{NAME}/sft/model/DONE.json",
        critic=f"{RESULTS}/{NAME}/critic/warmup/DONE.json",
        final=final_segment(NAME),
    output:
        f"{ABL_DIR}/critic/seed_{{seed}}/critic.json",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/critic_{{seed}}/attempt-{ATTEMPT}.log",
    wildcard_constraints:
        seed=r"\d+",
    container:
        TRAINER_IMAGE
    threads: CPUS
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
    params:
        sft=lambda w: f"{RESULTS}/{NAME}/sft/model",
        critic=lambda w: f"{RESULTS}/{NAME}/critic/warmup",
        rollouts=lambda w: ABL_ROLLOUTS,
        work=lambda w: f"{ABL_DIR}/critic/seed_{w.seed}",
    shell:
        "t1 bench critic --config {input.cfg} --sft {params.sft} --critic {params.critic} --tokenizer {input.tok} --rollouts {params.rollouts} --threads {threads} --work {params.work} --json {output} &> {log}"


rule ablations:
    input:
        gap=rules.ablation_gap.output,
        drift=rules.ablation_drift.output,
        critic=expand(f"{ABL_DIR}/critic/seed_{{seed}}/critic.json", seed=CRITIC_SEEDS),
        reports=[f"{RESULTS}/{run}/report.md" for run in ABL_RUNS.values()],
    output:
        md=f"{RESULTS}/{NAME}/ablations.md",
        json=f"{RESULTS}/{NAME}/ablations.json",
        critic_png=f"{RESULTS}/{NAME}/ablations_critic.png",
        reward_png=f"{RESULTS}/{NAME}/ablations_reward.png",
    log:
        f"{RESULTS}/{NAME}/logs/ablations/table/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        run=lambda w: f"{RESULTS}/{ABL_RUNS['dense']}",
        binary=lambda w: f"{RESULTS}/{ABL_RUNS['binary']}",
        cold=lambda w: f"{RESULTS}/{ABL_RUNS['cold']}",
    shell:
        "t1 ablations --run-dir {params.run} --binary {params.binary} --cold {params.cold} --gap {input.gap} --drift {input.drift} --critic {input.critic} --out {output.md} &> {log}"
