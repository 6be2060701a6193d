"""What a run reports: `t1 evaluate` (`evaluate`) and its figures and `summary.json`
(`summary`), the statistics (`stats`: Wilson intervals, pass@k, two-proportion tests), the
ablation table `t1 ablations` (`ablations`, rendered by `ablations_render`), and `t1 report`
(`report`, with its one-page HTML in `report_html`).

Pipeline stage 17 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo, train,
synth, curate, run, bench.
"""
