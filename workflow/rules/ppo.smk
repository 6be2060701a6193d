# PPO: a chain of segments. Segment i is one job (one Slurm allocation) that runs K steps from
# the newest finished step and writes iter_{i:05d}/DONE; it depends on segment i-1, so
# rerunning the same snakemake command after any crash continues from the last finished
# segment. Inside, `t1 supervise` watches `t1 segment` (and the engine servers of
# campaign.children); ahead of the time limit it has the trainer checkpoint and requeues the
# job (`--requeue`), which then resumes from that checkpoint.


rule ppo_segment:
    input:
        unpack(segment_inputs),
    output:
        f"{RESULTS}/{{run}}/ppo/iter_{{i}}/DONE",
    log:
        f"{RESULTS}/{{run}}/logs/ppo/iter_{{i}}/attempt-{ATTEMPT}.log",
    container:
        TRAINER_IMAGE
    threads: CPUS
    resources:
        runtime=SEGMENT_MIN,
        mem_mb=MEM_MB,
        cpus_per_task=CPUS,
        nodes=NODES,
        gpu=GPUS,
    params:
        run_dir=lambda w: f"{RESULTS}/{w.run}",
        workdir=lambda w: f"{RESULTS}/{w.run}/ppo/iter_{w.i}",
        sft=lambda w: f"{RESULTS}/{base(w.run)}/sft/model",
        pool=lambda w: f"{RESULTS}/{base(w.run)}/pool/train",
        critic=critic_flag,
        spec=children_flag,
    shell:
        "t1 supervise --config {input.cfg} --workdir {params.workdir} --deadline slurm --requeue {params.spec} -- t1 segment --config {input.cfg} --iter {wildcards.i} --run-dir {params.run_dir} --from {params.sft} --pool {params.pool} {params.critic} --tokenizer {input.tok} --out {output} &> {log}"
