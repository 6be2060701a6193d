#!/bin/bash
# Reference solution: install datamash from the package repository, group and summarize.
set -uo pipefail
apt-get update || true
apt-get install -y datamash
{
  printf 'group\tcount\tmean\tmax\n'
  tail -n +2 /app/measurements.tsv | datamash -s -g 1 count 2 mean 2 max 2
} > /app/stats.tsv
