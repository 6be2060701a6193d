#!/bin/bash
# Hangs on purpose.
sleep 3600
echo hello > /app/hello.txt
