"""Curating task pools: the audit scores and selection `t1 audit` (`audit`) and the `t1 pool`
builder (`pool`: rank audited tasks, drop near-duplicates, materialize a pool with its
manifest). Reading a pool back is t1/tasks/pool.py, which the rollout uses without reaching
synthesis or the audit.

Pipeline stage 14 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout, ppo, train,
synth.
"""
