# Evaluation of the SFT policy (the baseline) and of the final PPO policy on the eval pool.


rule evaluate_policy:
    input:
        unpack(eval_inputs),
    output:
        f"{RESULTS}/{{run}}/eval/{{stage}}/eval.json",
    log:
        f"{RESULTS}/{{run}}/logs/evaluate_{{stage}}/attempt-{ATTEMPT}.log",
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
        policy=eval_policy,
        pool=lambda w: f"{RESULTS}/{base(w.run)}/pool/eval/tasks",
        out=lambda w: f"{RESULTS}/{w.run}/eval/{w.stage}",
    shell:
        "t1 evaluate --config {input.cfg} --policy {params.policy} --tokenizer {input.tok} --tasks {params.pool} --label {wildcards.stage} --out {params.out} &> {log}"
