#!/bin/bash
# Crashes on purpose: a helper the verifier needs is missing, so no outcome is written.
set -e
python3 -c "import verifier_helpers_that_do_not_exist"
echo 1 > /logs/verifier/reward.txt
