#!/bin/bash
mkdir -p /app/build
cd /app/build
uvx -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
