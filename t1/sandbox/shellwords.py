"""Shell scripts as simple commands: what t1.sandbox.needs reads installs from (pure).

    from t1.sandbox.shellwords import logical_lines, simple_commands, strip_prefix
    for lineno, line in logical_lines(script_text):      # `\\` continuations joined
        for words in simple_commands(line):               # operators, redirections dropped
            words = strip_prefix(words)                   # sudo, env X=y, timeout 30, ...

Heuristic, like every reading of shell without running it: `shlex` splits the words; a line
it cannot split raises ValueError (the caller reports it as unparsed).
"""

from __future__ import annotations

import re
import shlex

_PREFIX_WORDS = {"sudo", "env", "time", "exec", "command", "nohup", "nice", "xargs", "then",
                 "do", "else", "!", "{", "(", "timeout", "stdbuf"}  # fmt: skip
_OPS = {"&&", "||", ";", "|", "&", ";;", "(", ")", "|&", "{", "}"}
_REDIR = re.compile(r"^\d*(>>?|<<?<?|>&|<&|&>>?)")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with `\\` continuations joined and whole-line comments dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
            if raw.lstrip().startswith("#"):
                continue
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        line = " ".join(b.strip() for b in buf).strip()
        buf = []
        if line:
            out.append((start, line))
    if buf:
        out.append((start, " ".join(b.strip() for b in buf).strip()))
    return out


def simple_commands(line: str) -> list[list[str]]:
    """Split one logical line into simple commands (words), dropping operators and redirections.

    Raises ValueError when the shell lexer cannot split it (unbalanced quotes).
    """
    line = re.sub(r"(?<![\w$=-])\d+(?=[<>])", " ", line)  # `2>/dev/null`: the fd number
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    cmds: list[list[str]] = [[]]
    skip_next = False
    for tok in lex:
        if skip_next:
            skip_next = False
            continue
        if tok in _OPS:
            cmds.append([])
            continue
        if tok and set(tok) <= set("<>&"):
            skip_next = True  # a redirection: its target follows
            continue
        if _REDIR.match(tok) and tok.rstrip("0123456789") in ("", ">", "<"):
            skip_next = True
            continue
        cmds[-1].append(tok)
    return [c for c in cmds if c]


def strip_prefix(words: list[str]) -> list[str]:
    i = 0
    while i < len(words):
        w = words[i]
        if w in _PREFIX_WORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w):
            i += 1
        elif words[i - 1 : i] == ["timeout"] or (
            i and words[i - 1] == "nice" and w.startswith("-")
        ):
            i += 1
        elif w.startswith("-") and i and words[i - 1] in ("env", "sudo", "timeout", "nice"):
            i += 1
        elif re.fullmatch(r"\d+[smhd]?", w) and i and words[i - 1] == "timeout":
            i += 1
        else:
            break
    return words[i:]


def tool_name(word: str) -> str:
    return word.rsplit("/", 1)[-1]
