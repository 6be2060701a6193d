"""Supervision: a segment's processes started, watched, restarted, stopped, and requeued.

    t1 supervise --config CFG --workdir DIR -- t1 segment --config CFG --iter 3 --out DONE
    python -m t1.supervise.submit --time 1440 --gpus 8 -- t1 supervise ...

* `child.py`      — what a child imports: exit codes, `heartbeat()`, `StopRequest` (tiny).
* `spec.py`       — the children and their restart / hang / stop policy (a YAML spec).
* `supervisor.py` — `t1 supervise`: the loop that starts, watches and stops the children.
* `slurm_job.py`  — the Slurm job a segment runs in: its time limit, whether to requeue it.
* `submit.py`     — submitit submission of a supervised command (Slurm or local executor).

Importing this package imports nothing else: a child takes only `t1.supervise.child`.

Pipeline stage 2 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store.
"""
