"""Observations as a terminal shows them (t1/agent/terminal.py): progress bars collapse to their
last state, whatever their timing, and ordinary output is untouched.

    .venv/bin/pytest tests/test_terminal.py -q
"""

from __future__ import annotations

import random

from t1.agent.loop import format_observation
from t1.agent.terminal import render_terminal


def apt_progress(rng: random.Random) -> str:
    """`apt-get install`'s progress as the bytes arrive: a random number of redraws."""
    out = "Reading package lists... Done\n"
    for pkg in ("jq", "datamash"):
        steps = sorted(rng.sample(range(1, 100), rng.randint(1, 12)))
        out += "".join(f"\rProgress: [{p:3d}%] [{'#' * (p // 10):<10}]" for p in steps)
        out += f"\rProgress: [100%] [##########]\r\x1b[KSetting up {pkg} (1.0) ...\n"
    return out


def test_a_progress_bar_collapses_to_its_last_state_whatever_the_timing():
    seen = {render_terminal(apt_progress(random.Random(seed))) for seed in range(20)}
    assert seen == {
        "Reading package lists... Done\nSetting up jq (1.0) ...\nSetting up datamash (1.0) ...\n"
    }
    # the negative control: the raw bytes differ between runs
    assert len({apt_progress(random.Random(seed)) for seed in range(20)}) > 1


def test_overwrite_semantics_are_a_terminals():
    assert render_terminal("abcdef\rXY") == "XYcdef"  # the rest of the line stays
    assert render_terminal("50%\r100%\n") == "100%\n"
    assert render_terminal("line\r\nnext\r\n") == "line\nnext\n"
    assert render_terminal("ab\bc") == "ac"
    assert render_terminal("12345\r\x1b[Kok") == "ok"  # erase to end of line
    assert render_terminal("\x1b[1;32mPASSED\x1b[0m tests") == "PASSED tests"
    assert render_terminal("\x1b]0;title\x07prompt") == "prompt"


def test_plain_output_is_untouched():
    text = "col1\tcol2  \n  indented\n\ntrailing  \n"
    assert render_terminal(text) is text


def test_the_observation_is_rendered_before_it_is_capped():
    obs = format_observation(0, "Downloading 1%\rDownloading 57%\rDownloading 100%\n", False)
    assert obs == "Downloading 100%\n[exit code 0]"
