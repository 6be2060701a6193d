#!/bin/bash
# A reward-file-only verifier (no pytest): bash builtins only.
mkdir -p /logs/verifier
line=""
read -r line < /app/greeting.txt
if [ "$line" = "hello world" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
