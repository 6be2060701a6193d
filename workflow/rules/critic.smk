# Critic warm-up: rollouts of the SFT policy over the training pool (every task once unless
# critic_warmup.trajectories says how many), then one epoch of value training on their binary
# (all assertions pass) outcomes, on the run's reward scale, before any policy step.


rule warmup_rollout:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
        pool=f"{RESULTS}/{{run}}/pool/train/manifest.json",
        sft=rules.sft.output,
    output:
        f"{RESULTS}/{{run}}/critic/rollout/rollout.json",
    log:
        f"{RESULTS}/{{run}}/logs/warmup_rollout/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: ROLLOUT_CPUS
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
        nodes=NODES,
        gpu=GPUS,
    params:
        policy=lambda w: f"{RESULTS}/{w.run}/sft/model/actor",
        # the pool (its manifest: the tasks in the seeded order), never its tasks/ dir (rank
        # order: the synthesized and seed tasks first, which the SFT policy never resolves)
        pool=lambda w: f"{RESULTS}/{w.run}/pool/train",
        out=lambda w: f"{RESULTS}/{w.run}/critic/rollout",
        size=warmup_size,
    shell:
        "t1 rollout --config {input.cfg} --policy {params.policy} --tokenizer {input.tok} --tasks {params.pool} {params.size} --out {params.out} &> {log}"


# train.backend megatron with train.gpus > 1: this one `t1 train` line, run inside the job's
# Slurm allocation, launches itself as `srun ... torchrun ... -m t1.cli train ...` over the
# allocation's nodes (campaign.nodes x campaign.gpus; t1/train/launch.py), the way the PPO
# segment launches its trainer; outside Slurm (the local profile) it exits 2 naming the torchrun
# line. srun must be reachable where the rule runs, as for the PPO segment (t1/run/plan.py).
rule warmup_critic:
    input:
        cfg=pinned,
        rollout=rules.warmup_rollout.output,
        sft=rules.sft.output,
    output:
        f"{RESULTS}/{{run}}/critic/warmup/DONE.json",
    log:
        f"{RESULTS}/{{run}}/logs/critic_warmup/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: CPUS
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
        nodes=NODES,
        gpu=GPUS,
    params:
        rollout=lambda w: f"{RESULTS}/{w.run}/critic/rollout",
        sft=lambda w: f"{RESULTS}/{w.run}/sft/model",
        out=lambda w: f"{RESULTS}/{w.run}/critic/warmup",
    shell:
        "t1 train --config {input.cfg} --stage critic_warmup --in {params.rollout} --from {params.sft} --out {params.out} &> {log}"
