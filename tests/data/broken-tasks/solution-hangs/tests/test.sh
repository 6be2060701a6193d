#!/bin/bash
if grep -qx hello /app/hello.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
