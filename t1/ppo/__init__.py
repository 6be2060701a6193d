"""PPO math as pure tensor functions: advantages (GAE), clipped losses, step metrics.

    from t1.ppo import advantages, losses, metrics

Nothing here touches a model, a file or an optimizer; `t1/train/step.py` wires these into the
critic-first PPO step. Tests: `.venv/bin/pytest tests/ppo -q`.

Pipeline stage 11 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent, tito, rollout.
"""
