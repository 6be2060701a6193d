"""Progress with an ETA for long commands: a live line on a terminal, log lines elsewhere.

    from t1.progress import Progress
    with Progress(len(tasks), "evaluate") as bar:
        for task in tasks:
            ...
            bar.advance(note=f"{task.id} resolved")

On a terminal (stderr is a tty) one line is redrawn in place (carriage return):
    evaluate [#########...........]  12/40  30%  elapsed 0:05:12  eta 0:12:08  csv-summary ok
Elsewhere (a Slurm log, a pipe) a plain line is appended at the start, then at most every
`every_s` seconds (env T1_PROGRESS_EVERY_S, default 30), and at the end, so a multi-hour job's
log says where it is:
    2026-12-01T22:50:03Z evaluate 12/40 30% elapsed 0:05:12 eta 0:12:08 rate 2.31/min | csv-summary ok
The ETA is the mean time per item so far times the items left ("eta ?" before the first).
`start` counts items done by an earlier attempt (a resumed stage): they are shown, but the
rate and ETA come from this process's items only. Thread-safe (rollout workers call
`advance` from their threads). Used by t1 evaluate, t1 oracle, t1 rollout and the training
stages (t1/train/stage.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

DEFAULT_EVERY_S = 30.0
BAR_WIDTH = 20


def clock_text(seconds: float) -> str:
    """H:MM:SS of a duration (hours grow past 24: 27:03:10)."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """`total` items of work labelled `label`; `advance()` once per item done."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: IO[str] | None = None,
        tty: bool | None = None,
        every_s: float | None = None,
        start: int = 0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.total, self.label = max(0, int(total)), label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        if every_s is None:
            every_s = float(os.environ.get("T1_PROGRESS_EVERY_S", DEFAULT_EVERY_S))
        self.every_s = every_s
        self.start = self.done = max(0, int(start))
        self.clock, self.wall = clock, wall
        self.t0 = self.last_print = clock()
        self.note = ""
        self.lock = threading.Lock()
        self.closed = False
        self._emit(force=True)

    # ------------------------------------------------------------------ public

    def advance(self, n: int = 1, note: str = "") -> None:
        with self.lock:
            self.done += n
            if note:
                self.note = note
            self._emit(force=self.done >= self.total)

    def close(self) -> None:
        """End the line on a terminal; a final log line elsewhere if the last was not one."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.tty:
                print(file=self.stream, flush=True)
            elif self.done < self.total:
                self._emit(force=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ drawing

    def eta_s(self) -> float | None:
        """Seconds left at this process's mean rate; None before its first item."""
        mine = self.done - self.start
        if mine <= 0:
            return None
        return (self.clock() - self.t0) / mine * max(0, self.total - self.done)

    def line(self) -> str:
        """The progress text (without the terminal bar and without the timestamp)."""
        elapsed = self.clock() - self.t0
        pct = f"{100 * self.done // self.total}%" if self.total else "-"
        eta = self.eta_s()
        mine = self.done - self.start
        rate = f"{60 * mine / elapsed:.3g}/min" if mine > 0 and elapsed > 0 else "-/min"
        return (
            f"{self.done}/{self.total} {pct} elapsed {clock_text(elapsed)} "
            f"eta {'?' if eta is None else clock_text(eta)} rate {rate}"
        )

    def _emit(self, force: bool) -> None:
        now = self.clock()
        if self.tty:
            filled = BAR_WIDTH * min(self.done, self.total) // max(1, self.total)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            text = f"{self.label} [{bar}] {self.line()}  {self.note}"
            print(f"\r\033[K{text[:200]}", end="", file=self.stream, flush=True)
            return
        if not force and now - self.last_print < self.every_s:
            return
        self.last_print = now
        stamp = datetime.fromtimestamp(self.wall(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        note = f" | {self.note}" if self.note else ""
        print(f"{stamp} {self.label} {self.line()}{note}", file=self.stream, flush=True)
