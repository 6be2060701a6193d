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
