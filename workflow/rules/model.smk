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
