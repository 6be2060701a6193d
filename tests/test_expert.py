"""Splitting reference solutions into complete commands for expert trajectories."""

from t1.agent.expert import split_script


def test_split_keeps_heredocs_loops_and_continuations_whole():
    script = """#!/bin/bash
set -euo pipefail
# make a file
cat > out.txt <<'EOF2'
a
b
EOF2
for i in 1 2; do
  echo $i
done
echo one \\
  two
f() { echo x; }
exit 0
"""
    cmds = split_script(script)
    assert cmds[0].startswith("cat > out.txt <<'EOF2'") and cmds[0].endswith("EOF2")
    assert cmds[1] == "for i in 1 2; do\n  echo $i\ndone"
    assert cmds[2] == "echo one \\\n  two"
    assert cmds[3] == "f() { echo x; }"
    assert len(cmds) == 4  # set -e, comments, shebang and exit dropped


def test_incomplete_tail_is_kept():
    assert split_script("echo ok\nif true; then\n echo x\n") == [
        "echo ok",
        "if true; then\n echo x",
    ]
