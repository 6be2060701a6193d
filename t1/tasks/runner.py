"""The verifier runner that generated tasks ship as tests/test.sh (t1 synth, t1 families).

One pytest case per assertion in tests/test_outputs.py; the harness (t1.verify.harness) sets
PYTEST_ADDOPTS for a JUnit XML per assertion. Nothing the agent left in its shell reaches the
tests: a fixed PATH (python3 by name on it), no Python variables, no conftest or ini file from
outside /tests; pytest comes from the image, else the offline wheelhouse of `t1 provision`.
"""

TEST_FILE = "test_outputs.py"

TEST_SH = """#!/bin/bash
# Verifier of a synthesized task: one pytest case per assertion. The harness sets
# PYTEST_ADDOPTS (JUnit XML per assertion); /logs/verifier/reward.txt is the binary aggregate.
# Nothing the agent left in its shell reaches the tests: a fixed PATH, no Python
# variables, no conftest or ini file from outside /tests.
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE PYTHONINSPECT PYTEST_PLUGINS
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/t1/bin
# python3 by name on that PATH: a verifier's harness stands in for `python3 -m pytest` there
# (called by absolute path, the image's pytest runs first and the harness after it).
PY=python3
mkdir -p /logs/verifier
run_pytest() {
  if "$PY" -c 'import pytest' 2>/dev/null; then
    "$PY" -m pytest "$@"
  elif ls /opt/t1/wheels/pytest-[0-9]*.whl >/dev/null 2>&1; then
    # offline wheelhouse (t1 provision): pure-Python wheels import straight from the zip
    pp=""
    for w in pytest pluggy iniconfig packaging; do
      pp="$pp:$(ls /opt/t1/wheels/$w-[0-9]*.whl | sort -V | tail -n 1)"
    done
    PYTHONPATH="${pp#:}" "$PY" -m pytest "$@"
  else
    "$PY" -m pip install -q pytest && "$PY" -m pytest "$@"
  fi
}
run_pytest -p no:cacheprovider -c /dev/null --rootdir=/tests --confcutdir=/tests /tests/test_outputs.py
rc=$?
if [ "$rc" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit "$rc"
"""
