"""Instruction-verifier alignment for `t1 audit`: the salient string literals of a task's test
file (paths, names, expected values; each line of a multi-line one), which of them the
instruction must name, the share it does name (values the agent can read in its environment
count as named), and the repair that appends the missing ones to the instruction.

    from t1.curate.audit_alignment import alignment, checked_literals
    share, missing = alignment(instruction, checked_literals(tests_src, "/app", solve_sh), env)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPAIR_HEADER = "## Checked paths and values"


# words that name tools and syntax, not task values
_GENERIC = {
    "utf-8", "ascii", "rb", "wb", "r:gz", "w:gz", "bash", "python3", "git", "log", "show",
    "cat-file", "rev-parse", "check-ignore", "HEAD", "sha256sum", "pytest", "PATH", "lambda",
    "import", "print", "True", "False", "None", "return",
}  # fmt: skip


def _is_path(s: str) -> bool:
    return " " not in s and ("/" in s or re.fullmatch(r"[\w.-]+\.[A-Za-z]\w{0,4}", s) is not None)


def verifier_literals(tests_src: str) -> list[str]:
    """String constants of the test functions and module-level assignments, minus code run by
    the tests, f-string pieces, flags, globs, URLs and generic words; multi-line strings
    become their lines."""
    try:
        tree = ast.parse(tests_src)
    except SyntaxError:
        return []
    scopes: list[ast.AST] = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]
    scopes += [n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)]
    skip: set[int] = set()
    found: list[str] = []
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.JoinedStr):
                skip.update(id(v) for v in node.values)
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                found.append(node.value)
    out: list[str] = []
    for s in found:
        if any(w in s for w in ("import ", "def ", "print(", "\n    ")):
            continue  # code the test runs, not a value it checks
        for line in s.splitlines() or [s]:
            line = line.strip()
            if (
                len(line) < 3
                or line.startswith(("-", "%"))
                or line in _GENERIC
                or "*" in line
                or "://" in line
            ):
                continue
            if line not in out:
                out.append(line)
    return out


def checked_literals(tests_src: str, workdir: str, solution: str) -> list[str]:
    """What the instruction must name: every path under the workdir the tests use, and every
    other literal the tests compare that the reference solution also spells out (a value the
    agent has to know, like a commit message or a port; computed answers such as a sum are
    not in the solution, and test-internal scratch values are in neither)."""
    out = []
    for s in verifier_literals(tests_src):
        if s.startswith(workdir + "/") or s == workdir:
            out.append(s)
        elif not s.startswith("/") and re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", solution):
            out.append(s)  # spelled out as a whole token, not inside a longer word
    return out


def alignment(instruction: str, literals: list[str], env_text: str) -> tuple[float, list[str]]:
    """(share of literals the instruction names, the missing ones). A literal the agent can
    find in its environment (a file's path or text) counts as named."""
    missing = [s for s in literals if s not in instruction and s not in env_text]
    return (1.0 - len(missing) / len(literals) if literals else 1.0), missing


def repaired_instruction(instruction: str, missing: list[str]) -> str:
    """The instruction with the missing paths and values appended (nothing else changed)."""
    lines = [f"- `{m}`" for m in missing]
    return (
        instruction.rstrip()
        + f"\n\n{REPAIR_HEADER}\n\nThe verifier checks these paths and values exactly:\n"
        + "\n".join(lines)
        + "\n"
    )


def env_text(task_dir: Path, workdir: str = "/app", cap: int = 2_000_000) -> str:
    """What the agent can read in its environment: the paths of the environment's files
    (`files/x` as `<workdir>/x`, the way t1 synth lays them out) and their text, capped."""
    out, size = [], 0
    env = task_dir / "environment"
    if env.is_dir():
        for p in sorted(env.rglob("*")):
            rel = p.relative_to(env).as_posix()
            out.append(rel)
            if rel.startswith("files/"):
                out.append(f"{workdir}/{rel[6:]}")
            if p.is_file() and size < cap:
                t = p.read_bytes()[: cap - size].decode("utf-8", errors="ignore")
                out.append(t)
                size += len(t)
    return "\n".join(out)
