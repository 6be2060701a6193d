#!/bin/bash
# The honest solution: does the work.
set -euo pipefail
cp /solution/calc.py /app/calc.py
