#!/bin/bash
echo hello > /app/word.txt
