#!/bin/bash
grep -qx hello /app/hello.txt
