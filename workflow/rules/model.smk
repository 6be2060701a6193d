# Model: the tokenizer and the initial policy: trained / built here (rules tokenizer,
# init_policy), or with model.init_from those of an HF checkpoint, checked against the config
# and linked (rule base_model; common.smk tokenizer_of, init_policy_of choose).


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


rule base_model:
    input:
        cfg=pinned,
        ckpt=init_from_config,
    output:
        tok=directory(f"{RESULTS}/{{run}}/base_model/tokenizer"),
        policy=directory(f"{RESULTS}/{{run}}/base_model/policy"),
    log:
        f"{RESULTS}/{{run}}/logs/base_model/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    shell:
        "t1 base-model --config {input.cfg} --tokenizer-out {output.tok} --out {output.policy} &> {log}"


rule pretrain:
    input:
        cfg=pinned,
        tok=tokenizer_dir,
        policy=init_policy_dir,
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
