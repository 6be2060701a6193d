#!/bin/bash
mkdir -p /app/build && echo built > /app/build/result.txt
