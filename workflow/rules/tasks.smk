# Tasks: the run's pinned config, synthesis, audit, validation, pools.


rule run_config:
    output:
        f"{RESULTS}/{{run}}/config.yaml",
    log:
        f"{RESULTS}/{{run}}/logs/run_config.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        base=" ".join(CONFIG_FILES),
        sets=set_flags,
    shell:
        "python -m t1.campaign config --base {params.base} {params.sets} --out {output} &> {log}"


rule synth_tasks:
    input:
        cfg=pinned,
    output:
        f"{RESULTS}/{{run}}/tasks/synth/DONE.json",
    log:
        f"{RESULTS}/{{run}}/logs/synth.log",
    container:
        TRAINER_IMAGE
    threads: conf("synth.workers")
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=conf("synth.workers"),
    params:
        out=lambda w: f"{RESULTS}/{w.run}/tasks/synth",
        rounds=conf("synth.rounds"),
    shell:
        "t1 synth --config {input.cfg} --rounds {params.rounds} --out {params.out} &> {log}"


rule audit_tasks:
    input:
        cfg=pinned,
        synth=rules.synth_tasks.output,
    output:
        f"{RESULTS}/{{run}}/tasks/audit/audit.json",
    log:
        f"{RESULTS}/{{run}}/logs/audit.log",
    container:
        TRAINER_IMAGE
    threads: conf("synth.workers")
    resources:
        runtime=TRAIN_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=conf("synth.workers"),
    params:
        tasks=lambda w: f"{RESULTS}/{w.run}/tasks/synth",
        out=lambda w: f"{RESULTS}/{w.run}/tasks/audit",
    shell:
        "t1 audit {params.tasks} --config {input.cfg} --out {params.out} &> {log}"


rule validate_tasks:
    input:
        unpack(split_inputs),
    output:
        f"{RESULTS}/{{run}}/tasks/validate/oracle_{{split}}.json",
    log:
        f"{RESULTS}/{{run}}/logs/validate_{{split}}.log",
    container:
        TRAINER_IMAGE
    threads: 2
    resources:
        runtime=60,
        mem_mb=4000,
        cpus_per_task=2,
    params:
        dirs=split_dirs,
    shell:
        "t1 oracle {params.dirs} --config {input.cfg} --jobs {threads} --json {output} &> {log}"


rule pool:
    input:
        unpack(split_inputs),
        validated=f"{RESULTS}/{{run}}/tasks/validate/oracle_{{split}}.json",
    output:
        f"{RESULTS}/{{run}}/pool/{{split}}/manifest.json",
    log:
        f"{RESULTS}/{{run}}/logs/pool_{{split}}.log",
    container:
        TRAINER_IMAGE
    resources:
        runtime=30,
        mem_mb=2000,
    params:
        dirs=split_dirs,
        audit=lambda w, input: (
            f"--audit {input.audit}" if hasattr(input, "audit") else ""
        ),
        out=lambda w: f"{RESULTS}/{w.run}/pool/{w.split}",
    shell:
        "t1 pool --config {input.cfg} --in {params.dirs} --validated {input.validated} {params.audit} --out {params.out} &> {log}"
