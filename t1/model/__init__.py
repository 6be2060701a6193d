"""The policy and its routing: the tiny MoE policy and `t1 init-policy` (`policy`), R³
routing capture and replay (`routing`), and the per-GPU memory planner `t1 plan-memory` (`memory`: the layout
search; `memory_spec`: the model shapes it sizes; `memory_breakdown`: bytes per role and item).

Pipeline stage 6 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify.
"""
