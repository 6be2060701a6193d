# Report: tables and plots from the run's JSON-lines events (metrics, incidents, evaluations).


rule report:
    input:
        cfg=pinned,
        final=lambda w: final_segment(w.run),
        evals=expand(
            f"{RESULTS}/{{{{run}}}}/eval/{{stage}}/eval.json", stage=["sft", "ppo"]
        ),
    output:
        f"{RESULTS}/{{run}}/report.md",
    log:
        f"{RESULTS}/{{run}}/logs/report/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        run_dir=lambda w: f"{RESULTS}/{w.run}",
    shell:
        "t1 report --config {input.cfg} --run-dir {params.run_dir} --out {output} &> {log}"
