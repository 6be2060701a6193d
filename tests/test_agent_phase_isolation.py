"""During the agent phase the task's tests and reference solution are nowhere in the sandbox.

The verifier copies the tests in only after the agent stopped (t1.verify.in_shell.copy_tests_in);
the solution travels only for `t1 oracle`. The task's host directory is not bound either.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from shared_fixtures import requires_bwrap

from t1.tasks import load_task
from t1.tasks.env import open_task_sandbox

TASKS = Path(__file__).resolve().parents[1] / "workflow" / "tasks"


@pytest.mark.integration
@requires_bwrap
@pytest.mark.parametrize("name", ["stats-debug", "static-site-server"])  # v2 and v1 layouts
def test_tests_and_solution_are_absent_during_the_agent_phase(name):
    task = load_task(TASKS / name)
    test_files = (
        [p.name for p in task.verifier.tests_dir.iterdir()] if task.verifier.tests_dir else []
    )
    with open_task_sandbox(task) as sb:
        for path in ("/tests", "/solution", "/oracle", str(task.path), str(task.path.parent)):
            r = sb.exec(f"ls -d {path}")
            assert r.exit_code != 0, f"{path} is visible during the agent phase: {r.output}"
        names = " -o ".join(
            f"-name {n}" for n in [*test_files, task.solution.path.name, "run-tests.sh"]
        )
        found = sb.exec(
            f"find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( {names} \\) -print 2>/dev/null",
            timeout=120,
        ).output.split()
        # A file of the same name may exist on the host system (e.g. a packaged test.sh); none
        # may carry the task's own content.
        own = [
            (task.verifier.tests_dir / n).read_bytes()
            for n in test_files
            if (task.verifier.tests_dir / n).is_file()
        ]
        for hit in found:
            body = sb.exec(f"head -c 200000 {hit} | md5sum").output.split()[0]
            assert all(hashlib.md5(o[:200000]).hexdigest() != body for o in own), (
                f"{hit} holds a task test file"
            )
