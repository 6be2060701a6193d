"""T1: PPO for a Mixture-of-Experts terminal agent, rewarded by executing each task's verifier.

The command line is `t1` (t1/cli.py), one subcommand per workflow rule. The package reads as
the pipeline: one package per stage, each importing only the stages before it (its
`__init__.py` says what it holds; tests/test_layering.py keeps the order):

    store      what a run keeps on disk: checkpoints, locks, incidents, metrics, pins
    supervise  a segment's processes started, watched, restarted, stopped, requeued
    sandbox    bwrap and apptainer sandboxes, Dockerfile layers, the offline tool cache
    tasks      Terminal-Bench tasks, their environments, families, pools as read back
    verify     a task's tests in a compartment, their outcomes, the reward, `t1 oracle`
    model      the policy, R³ routing, the memory planner
    engine     inference engines: local, SGLang client, `t1 serve`, the rollout fleet
    agent      the conversation, the tokenizer, the agent loop, the expert, trajectories
    tito       token-in token-out streams and their audit
    rollout    `t1 rollout`: batches of scored trajectories, over-sampling
    ppo        PPO math as pure tensor functions
    train      trainers (hf, megatron), the PPO step, pre-training, SFT, critic warm-up
    synth      recursive verified task synthesis
    curate     the audit and `t1 pool`
    run        a campaign's config, a segment's plan, `t1 segment`
    bench      benchmarks (`t1 bench NAME`)
    eval       `t1 evaluate`, statistics, the ablation table, `t1 report`

The shared root modules (`config` with its `config_sections` and `config_schema`, `records`,
`progress`, `httpjson`, `rng`) import no stage.
"""

__version__ = "0.1.0"
