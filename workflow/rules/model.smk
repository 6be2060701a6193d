# Model: the tokenizer and the initial policy.


rule tokenizer:
    input:
        cfg=pinned,
    output:
        directory(f"{RESULTS}/{{run}}/tokenizer"),
    log:
        f"{RESULTS}/{{run}}/logs/tokenizer/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    resources:
        runtime=30,
        mem_mb=4000,
    params:
        how=(
            "qwen3.5"
            if conf("tokenizer.kind") == "qwen3.5"
            else f"train --vocab-size {conf('tokenizer.vocab_size')}"
        ),
    shell:
        "t1 tokenizer {params.how} --out {output} &> {log}"


rule init_policy:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
    output:
        directory(f"{RESULTS}/{{run}}/policy/init"),
    log:
        f"{RESULTS}/{{run}}/logs/init_policy/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    resources:
        runtime=60,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
    shell:
        "t1 init-policy --config {input.cfg} --tokenizer {input.tok} --out {output} &> {log}"


rule pretrain:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
        policy=rules.init_policy.output,
    output:
        f"{RESULTS}/{{run}}/pretrain/DONE.json",
    log:
        f"{RESULTS}/{{run}}/logs/pretrain/attempt-{ATTEMPT}.log",
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
        out=lambda w: f"{RESULTS}/{w.run}/pretrain",
    shell:
        "t1 train --config {input.cfg} --stage pretrain --from {input.policy} --tokenizer {input.tok} --out {params.out} &> {log}"
