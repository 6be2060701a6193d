#!/bin/bash
echo 3 > /app/n.txt
