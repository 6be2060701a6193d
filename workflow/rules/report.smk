# Report: tables and plots from the run's JSON-lines events (metrics, incidents, evaluations),
# and summary.json (SFT vs PPO on held-out and train-pool tasks, for scripts).


rule report:
    input:
        cfg=pinned,
        final=lambda w: final_segment(w.run),
        evals=report_evals,
    output:
        report=f"{RESULTS}/{{run}}/report.md",
        html=f"{RESULTS}/{{run}}/report.html",
        summary=f"{RESULTS}/{{run}}/summary.json",
    log:
        f"{RESULTS}/{{run}}/logs/report/attempt-{ATTEMPT}.log",
    localrule: True
    container:
        TRAINER_IMAGE
    params:
        run_dir=lambda w: f"{RESULTS}/{w.run}",
        shared=shared_flag,
    shell:
        "t1 report --config {input.cfg} --run-dir {params.run_dir} --out {output.report} {params.shared} &> {log}"
