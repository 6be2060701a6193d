"""Terminal-Bench tasks (v1 task.yaml and v2/Harbor task.toml layouts) as one `Task` record.

t1 tasks check DIR...        report every problem of each task, with file and field

from t1.tasks import find_tasks, load_task, check_task

Modules: `model` (the records), `load` (both layouts -> Task), `env` (a task's environment and
sandbox, and its reference solution run there), `pool` (a materialized pool and its one epoch
order), `pool_build` (`t1 pool`: rank audited tasks, drop near-duplicates, materialize),
`cli` (`t1 tasks`). Only `load` and `model` are imported here, so `import t1.tasks` stays light.

Pipeline stage 4 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox.
"""

from t1.tasks.load import check_task, dockerfile_workdir, find_tasks, load_task
from t1.tasks.model import (
    Environment,
    Problem,
    Resources,
    Solution,
    Task,
    TaskError,
    Verifier,
)

__all__ = [
    "Environment",
    "Problem",
    "Resources",
    "Solution",
    "Task",
    "TaskError",
    "Verifier",
    "check_task",
    "dockerfile_workdir",
    "find_tasks",
    "load_task",
]
