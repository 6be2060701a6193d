"""What a supervised child imports: the exit codes, the heartbeat and the stop flag.

    from t1.supervise.child import EXIT_REQUEUE, StopRequest, heartbeat

    stop = StopRequest()              # flag-only handlers for SIGUSR2 and SIGTERM
    for step in steps:
        heartbeat()                   # touch $T1_HEARTBEAT_FILE (no-op when not supervised)
        ...
        if stop.requested:            # a safe point: checkpoint, then ask to be run again
            save(); sys.exit(EXIT_REQUEUE)

Exit codes (the contract between `t1 supervise`, its children, `t1 segment`, the trainer and
the Slurm job):
    0   EXIT_DONE      the work is finished
    1   EXIT_FAILED    a failure (the supervisor restarts the child while its budget lasts)
    2   EXIT_USAGE     bad arguments or config: fatal at once, never restarted
    75  EXIT_REQUEUE   stopped early after a checkpoint (EX_TEMPFAIL): run me again

This module is tiny on purpose: the trainer and the segment driver import it without pulling
in the supervisor (t1/supervise/supervisor.py).
"""

from __future__ import annotations

import os
import signal
from typing import Any

EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_REQUEUE = 0, 1, 2, 75
HEARTBEAT_ENV = "T1_HEARTBEAT_FILE"


def heartbeat() -> None:
    """Touch $T1_HEARTBEAT_FILE (no-op when not supervised). Cheap: call it every step."""
    path = os.environ.get(HEARTBEAT_ENV)
    if path:
        with open(path, "a"):
            os.utime(path)


class StopRequest:
    """Flag-only handlers for SIGUSR2 and SIGTERM: `requested` turns True, nothing else runs."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGUSR2, signal.SIGTERM)) -> None:
        self.requested = False
        self.signal: str | None = None
        for sig in signals:
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True
        self.signal = signal.Signals(signum).name
