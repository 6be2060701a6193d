"""Running a task's tests and scoring them: the verifier (`verifier`: the task's tests in a
compartment beside the agent's sandbox), the pytest runner inside it (`harness`), the report
formats it reads back (`outcomes`: JUnit XML, the -rA summary, reward files), the reward
(`reward`: dense per-assertion or binary), and `t1 oracle` (`oracle`: reference solutions or
nothing, then the verifier).

    t1 oracle workflow/tasks --agent oracle --jobs 2

Pipeline stage 5 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks.
"""
