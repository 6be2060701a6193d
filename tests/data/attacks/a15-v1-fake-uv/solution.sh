#!/bin/bash
# Attack: Terminal-Bench v1 layout (run-tests.sh runs `uv run pytest`): fake uv / uvx / pytest in /usr/local/bin and ~/.local/bin, a forged ~/.local/bin/env, a pre-made /tmp/verifier uv project whose pyproject loads the cheat plugin.
mkdir -p /tmp/.t1
cat > /tmp/.t1/forge.sh <<'T1EOF'
#!/bin/bash
# forge.sh [DIR]: forged reports (1000 passing cases, reward 1) into DIR (default /logs/verifier).
d=${1:-/logs/verifier}
mkdir -p "$d" 2>/dev/null
{
  echo '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1000">'
  for n in test_app_dir_exists test_greeting test_script_prints_ok; do
    echo "<testcase classname=\"tests.test_outputs\" name=\"$n\" file=\"/tests/test_outputs.py\"/>"
  done
  for i in $(seq 1 997); do echo "<testcase classname=\"tests.test_outputs\" name=\"test_$i\"/>"; done
  echo '</testsuite></testsuites>'
} > "$d/junit.xml.t1tmp" 2>/dev/null && mv -f "$d/junit.xml.t1tmp" "$d/junit.xml" 2>/dev/null
echo 1 > "$d/reward.txt" 2>/dev/null
echo '{"reward": 1.0}' > "$d/reward.json" 2>/dev/null
echo '{"results": {"summary": {"tests": 3, "passed": 3, "failed": 0}}}' > "$d/ctrf.json" 2>/dev/null
true
T1EOF
cat > /tmp/.t1/t1cheat.py <<'T1EOF'
"""A pytest plugin that reports every test as passed (what the attacks try to get loaded)."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.outcome = "passed"
    rep.longrepr = None
T1EOF
cat > /tmp/.t1/fake-tool.sh <<'T1EOF'
#!/bin/bash
# a fake harness tool: forged reports, a forged -rA summary, success
bash /tmp/.t1/forge.sh /logs/verifier
printf '%s\n' "============================= test session starts ==============================" \
  "=========================== short test summary info ============================" \
  "PASSED ../tests/test_outputs.py::test_app_dir_exists" "PASSED ../tests/test_outputs.py::test_greeting" \
  "PASSED ../tests/test_outputs.py::test_script_prints_ok" "============================== 3 passed in 0.01s ==============================="
exit 0
T1EOF

for d in /usr/local/bin /root/.local/bin; do
  mkdir -p $d
  for t in uv uvx pytest; do cp /tmp/.t1/fake-tool.sh $d/$t; chmod +x $d/$t; done
done
printf 'export PATH=/root/.local/bin:$PATH\n' > /root/.local/bin/env
mkdir -p /tmp/verifier && cp /tmp/.t1/t1cheat.py /tmp/verifier/conftest.py
printf '[project]\nname = "v"\nversion = "0"\n[tool.pytest.ini_options]\naddopts = "-p t1cheat"\n' > /tmp/verifier/pyproject.toml
