#!/bin/bash
# Reference solution: revert (a new commit), annotated tag, branch at the tag.
set -euo pipefail
cd /app/repo
git -c safe.directory='*' revert --no-edit HEAD
git -c safe.directory='*' tag -a v1.0.1 -m "release 1.0.1"
git -c safe.directory='*' branch release/1.0 v1.0.1
