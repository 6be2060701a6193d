"""Sampling a batch: `t1 rollout` (`collect`: tasks x samples through the agent loop in
sandboxes, scored by the verifier, written as trajectory records) and over-sampling with tail
truncation (`oversample`).

    t1 rollout --config F --policy DIR --pool DIR --out DIR

Pipeline stage 10 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito.
"""
