# Tasks: the run's pinned config, synthesis, audit, validation, pools.


rule run_config:
    output:
        f"{RESULTS}/{{run}}/config.yaml",
    log:
        f"{RESULTS}/{{run}}/logs/run_config/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        base=" ".join(CONFIG_FILES),
        sets=set_flags,
    shell:
        "t1 run-config --base {params.base} {params.sets} --out {output} &> {log}"


# Where the network is: the offline tool cache (what the tasks install, read from their
# Dockerfiles, verifiers and solutions) and the task environments (bwrap layers or apptainer
# images) are built here, on the submit host, before any compute job; compute jobs only read
# those caches.
rule families:
    input:
        cfg=ancient(f"{RESULTS}/{NAME}/config.yaml"),
    output:
        f"{FAMILIES_DIR}/families.json",
    log:
        f"{FAMILIES_DIR}/logs/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    shell:
        "t1 families --config {input.cfg} --out $(dirname {output}) &> {log}"


rule provision:
    input:
        cfg=pinned,
        families=families_done,
    output:
        f"{RESULTS}/{{run}}/provision/provision.json",
    log:
        f"{RESULTS}/{{run}}/logs/provision/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        dirs=" ".join(
            sorted(
                set(conf("tasks.train_dirs"))
                | set(conf("tasks.eval_dirs"))
                | set(family_dirs("eval"))
            )
        ),
        backend=conf("sandbox.backend"),
        env_cache=conf("tasks.env_cache"),
        out=(
            f"--out {conf('sandbox.provision_dir')}"
            if conf("sandbox.provision_dir")
            else ""
        ),
    shell:
        "t1 provision --tasks {params.dirs} --build-envs {params.backend} --env-cache {params.env_cache} {params.out} --json {output} &> {log}"


rule synth_tasks:
    input:
        cfg=pinned,
        provision=provisioned,
    output:
        f"{RESULTS}/{{run}}/tasks/synth/DONE.json",
    log:
        f"{RESULTS}/{{run}}/logs/synth/attempt-{ATTEMPT}.log",
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
        f"{RESULTS}/{{run}}/logs/audit/attempt-{ATTEMPT}.log",
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


# One task more in flight than the job's cores: a task waits on its sandbox's shell between its
# CPU-bound steps, and with --jobs = cores the two cores were busy 85% of the time (LOG.md, 2026-12-06)
rule validate_tasks:
    input:
        unpack(split_inputs),
    output:
        f"{RESULTS}/{{run}}/tasks/validate/oracle_{{split}}.json",
    log:
        f"{RESULTS}/{{run}}/logs/validate_{{split}}/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: 2
    resources:
        runtime=60,
        mem_mb=4000,
        cpus_per_task=2,
    params:
        dirs=check_dirs,
    shell:
        "t1 oracle {params.dirs} --config {input.cfg} --jobs $(( {threads} + 1 )) --json {output} &> {log}"


# the no-op score of every task (assertions that pass with no agent action): the pool records
# it per task for reward.subtract_noop (t1.verify.reward). Both checks run each task once per
# run: the eval split checks only the dirs the train split does not (check_dir_list)
rule noop_tasks:
    input:
        unpack(split_inputs),
    output:
        f"{RESULTS}/{{run}}/tasks/validate/noop_{{split}}.json",
    log:
        f"{RESULTS}/{{run}}/logs/noop_{{split}}/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: 2
    resources:
        runtime=60,
        mem_mb=4000,
        cpus_per_task=2,
    params:
        dirs=check_dirs,
    shell:
        "t1 oracle {params.dirs} --agent noop --config {input.cfg} --jobs $(( {threads} + 1 )) --json {output} &> {log}"


rule pool:
    input:
        unpack(split_inputs),
        validated=check_files("oracle"),
        noop=check_files("noop"),
    output:
        f"{RESULTS}/{{run}}/pool/{{split}}/manifest.json",
    log:
        f"{RESULTS}/{{run}}/logs/pool_{{split}}/attempt-{ATTEMPT}.log",
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
        validated=lambda w, input: " ".join(f"--validated {f}" for f in input.validated),
        noop=lambda w, input: " ".join(f"--noop {f}" for f in input.noop),
    shell:
        "t1 pool --config {input.cfg} --in {params.dirs} {params.validated} {params.noop} {params.audit} --out {params.out} &> {log}"
