"""What a verifier run gives (`VerifierResult`), and its check against the task's reference run.

    result = check_against(result, recorded_names(task))   # other assertion names: `tampered`
    result.passed, result.total, result.resolved, result.tampered, result.reported

t1.verify.verifier.score_in_sandbox makes one and checks it (the module docstring there says
what `tampered` defends); the shell path (t1.verify.in_shell) and the hardened one
(t1.verify.hardened) fill it in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from t1.tasks.model import Task
from t1.verify.outcomes import Assertion

OUTPUT_KEEP_CHARS = 8000  # tail of the verifier output kept in the result
_MAX_READ_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class VerifierResult:
    assertions: list[Assertion] = field(default_factory=list)
    source: str = "none"  # junit | summary | reward_file | none
    exit_code: int | None = None
    output: str = ""  # tail of the verifier's output
    error: str | None = None
    reward_value: float | None = None  # what reward.txt / reward.json said, if present
    seconds: float = 0.0
    tampered: str | None = None  # why the report was rejected (then every assertion failed)
    reported: list[Assertion] = field(default_factory=list)  # what a rejected report claimed
    hardened: bool = False  # ran in the verifier compartment (see t1.verify.verifier)
    notes: list[str] = field(default_factory=list)  # services left running, processes killed

    @property
    def passed(self) -> int:
        return sum(a.ok for a in self.assertions)

    @property
    def total(self) -> int:
        return len(self.assertions)

    @property
    def resolved(self) -> bool:
        return self.total > 0 and self.passed == self.total


def recorded_names(task: Task) -> list[str] | None:
    """The assertion names the task's pool recorded from its reference run (None: not recorded).
    From the pool's records, read once per manifest version (t1.verify.reward.pool_records): a
    verifier run of a pool task read and resolved the whole manifest, ~11 ms for the tiny
    campaign's 422-task eval pool, every run."""
    from t1.verify.reward import RewardError, task_record

    try:
        rec = task_record(task.path)
    except RewardError:
        return None
    return None if rec is None or rec.assertion_names is None else list(rec.assertion_names)


def check_against(result: VerifierResult, expected: list[str] | None) -> VerifierResult:
    """`result`, or a `tampered` one when its assertion names differ from `expected`.

    A tampered result keeps what was claimed in `reported`; its assertions are the expected
    names, all failed (so passed = 0, total = the task's own count): it is never accepted.
    """
    if expected is None or result.error or result.tampered or not result.assertions:
        return result
    got = sorted(a.name for a in result.assertions)
    want = sorted(expected)
    if got == want:
        return result
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    reason = (
        f"the verifier reported {len(got)} assertions, the task's reference run recorded "
        f"{len(want)}"
        + (f"; missing: {', '.join(missing[:5])}" if missing else "")
        + (f"; not in the task: {', '.join(extra[:5])}" if extra else "")
        + ("; same names, different counts" if not missing and not extra else "")
    )
    return dataclasses.replace(
        result,
        assertions=[Assertion(n, "failed") for n in want],
        reported=list(result.assertions),
        tampered=reason,
    )
