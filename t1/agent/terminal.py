"""Command output as a terminal would show it: carriage-return overwrites, backspaces and line
erasures applied, colour and cursor escapes dropped.

    render_terminal("Get:1 ... 0%\\rGet:1 ... 45%\\rGet:1 ... 100%\\n")  ->  "Get:1 ... 100%\\n"

A progress bar (`apt-get install`, `pip download`, `curl`, `wget`) rewrites its line with `\\r`
many times; the raw bytes hold every intermediate state, how many depends on timing, and they
cost the policy tokens of noise. The agent loop renders each observation with this before it
is capped and tokenized (t1/agent/loop.py), so the observation is what a person at the
terminal saw, and the same command gives the same observation however fast it ran.

Semantics (a VT100 line discipline, per line): `\\r` moves the cursor to column 0 and the
characters after it overwrite what is there (the rest of the line stays, as on a terminal);
`\\b` moves one column left; `ESC [ n K` erases to the end (0), to the start (1) or the whole
line (2); every other CSI sequence (colours, cursor movement) and OSC title sequence is
dropped. `\\r\\n` is an ordinary line end. A line that held any of these loses its trailing
blanks (a screen shows none); lines without them are not touched.
"""

from __future__ import annotations

import re

# CSI: ESC [ params intermediates final; OSC: ESC ] ... BEL or ESC \ ; other two-byte escapes
_ESCAPE = re.compile(r"\x1b\[([0-?]*)[ -/]*([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\r\b]|\x1b")


def render_line(line: str) -> str:
    """One line (no `\\n` in it) as the terminal leaves it."""
    if not _CONTROL.search(line):
        return line
    cells: list[str] = []
    col = 0
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch == "\x1b":
            m = _ESCAPE.match(line, i)
            if m is None:  # a lone ESC: dropped
                i += 1
                continue
            if m.group(2) == "K":
                mode = m.group(1) or "0"
                if mode == "0":
                    del cells[col:]
                elif mode == "1":
                    cells[: col + 1] = [" "] * min(col + 1, len(cells))
                elif mode == "2":
                    cells = [" "] * min(col, len(cells)) if col else []
            i = m.end()
            continue
        else:
            if col < len(cells):
                cells[col] = ch
            else:
                cells.extend(" " * (col - len(cells)))
                cells.append(ch)
            col += 1
        i += 1
    return "".join(cells).rstrip(" ")


def render_terminal(text: str) -> str:
    """`text` as a terminal shows it (see the module docstring); line ends are kept."""
    if not _CONTROL.search(text):
        return text
    return "\n".join(render_line(line) for line in text.split("\n"))
