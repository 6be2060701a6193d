"""t1.progress: the plain log lines a Slurm log gets, their period, the ETA, the terminal line.

pytest tests/test_progress.py -q
"""

from __future__ import annotations

import io
import re
import threading

from t1.progress import Progress, clock_text

LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (?P<label>\S+) (?P<done>\d+)/(?P<total>\d+) (?P<pct>\d+)% "
    r"elapsed (?P<elapsed>\d+:\d\d:\d\d) eta (?P<eta>\?|\d+:\d\d:\d\d) rate (?P<rate>\S+)/min"
    r"(?: \| (?P<note>.*))?$"
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _bar(total, every_s=30.0, start=0, tty=False):
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(total, "evaluate", stream=out, tty=tty, every_s=every_s, start=start,
                   clock=clock, wall=lambda: 1_764_629_403.0)  # fmt: skip
    return bar, out, clock


def _lines(out: io.StringIO) -> list[re.Match]:
    lines = out.getvalue().splitlines()
    matches = [LINE.match(x) for x in lines]
    assert all(matches), lines
    return matches


def test_log_lines_are_periodic_with_elapsed_eta_and_a_timestamp():
    bar, out, clock = _bar(10, every_s=30)
    for i in range(9):
        clock.t += 10  # one item every 10 s
        bar.advance(note=f"task-{i} ok")
    bar.advance(note="task-9 ok")  # the last: always a line, even within the period
    bar.close()
    m = _lines(out)
    # the opening line, one every 30 s (after items 3, 6, 9) and the last
    assert [int(x["done"]) for x in m] == [0, 3, 6, 9, 10]
    assert m[0]["eta"] == "?" and m[0]["note"] is None
    assert m[0].string.startswith("2025-12-01T22:50:03Z evaluate 0/10 0%")
    # after 3 items in 30 s: 7 left at 10 s each
    assert (m[1]["elapsed"], m[1]["eta"], m[1]["rate"]) == ("0:00:30", "0:01:10", "6")
    assert m[2]["note"] == "task-5 ok" and m[2]["eta"] == "0:00:40"
    assert (m[-1]["done"], m[-1]["pct"], m[-1]["eta"]) == ("10", "100", "0:00:00")
    assert "\r" not in out.getvalue()


def test_no_line_within_the_period_and_a_closing_line_when_stopped_early():
    bar, out, clock = _bar(100, every_s=60)
    for _ in range(5):
        clock.t += 1
        bar.advance()
    assert len(_lines(out)) == 1  # only the opening line: 5 s < 60 s
    bar.close()
    m = _lines(out)
    assert [int(x["done"]) for x in m] == [0, 5]  # where it stopped, for the log


def test_a_resumed_run_shows_earlier_items_but_its_eta_uses_only_its_own():
    bar, out, clock = _bar(10, every_s=0, start=6)
    clock.t += 100  # one item of this process in 100 s; 3 left
    bar.advance()
    m = _lines(out)
    assert (m[0]["done"], m[0]["eta"]) == ("6", "?")
    assert (m[1]["done"], m[1]["eta"], m[1]["elapsed"]) == ("7", "0:05:00", "0:01:40")


def test_terminal_output_redraws_one_line_in_place():
    bar, out, clock = _bar(4, tty=True)
    for _ in range(4):
        clock.t += 5
        bar.advance(note="x")
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 5 and text.endswith("\n") and text.count("\n") == 1
    last = text.split("\r")[-1]
    assert "evaluate [####################] 4/4 100%" in last and "eta 0:00:00" in last


def test_advance_from_many_threads_counts_every_item():
    bar, out, _ = _bar(400, every_s=1e9)
    threads = [
        threading.Thread(target=lambda: [bar.advance() for _ in range(100)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bar.done == 400 and _lines(out)[-1]["done"] == "400"


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 3600, 97390)] == [
        "0:00:00",
        "0:01:00",
        "1:00:00",
        "27:03:10",
    ]
