"""Terminal-Bench tasks (v1 task.yaml and v2/Harbor task.toml layouts) as one `Task` record.

t1 tasks check DIR...        report every problem of each task, with file and field

from t1.tasks import find_tasks, load_task, check_task
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
