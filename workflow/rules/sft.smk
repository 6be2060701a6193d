# SFT: execute the reference solutions as tool calls (expert trajectories), then train on them.


rule expert_rollout:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
        pool=f"{RESULTS}/{{run}}/pool/train/manifest.json",
    output:
        f"{RESULTS}/{{run}}/sft/expert/rollout.json",
    log:
        f"{RESULTS}/{{run}}/logs/expert_rollout/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: ROLLOUT_CPUS
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=ROLLOUT_CPUS,
    params:
        pool=lambda w: f"{RESULTS}/{w.run}/pool/train/tasks",
        out=lambda w: f"{RESULTS}/{w.run}/sft/expert",
    shell:
        "t1 rollout --config {input.cfg} --expert --tokenizer {input.tok} --tasks {params.pool} --out {params.out} &> {log}"


# train.backend megatron with train.gpus > 1: this one `t1 train` line, run inside the job's
# Slurm allocation, launches itself as `srun ... torchrun ... -m t1.cli train ...` over the
# allocation's nodes (campaign.nodes x campaign.gpus; t1/train/launch.py), the way the PPO
# segment launches its trainer; outside Slurm (the local profile) it exits 2 naming the torchrun
# line. srun must be reachable where the rule runs, as for the PPO segment (t1/run/plan.py).
rule sft:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
        expert=rules.expert_rollout.output,
        start=sft_start_done,
    output:
        f"{RESULTS}/{{run}}/sft/model/DONE.json",
    log:
        f"{RESULTS}/{{run}}/logs/sft/attempt-{ATTEMPT}.log",
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
        expert=lambda w: f"{RESULTS}/{w.run}/sft/expert",
        out=lambda w: f"{RESULTS}/{w.run}/sft/model",
        start=lambda w: sft_start(w.run),
    shell:
        "t1 train --config {input.cfg} --stage sft --in {params.expert} --from {params.start} --tokenizer {input.tok} --out {params.out} &> {log}"
