#!/bin/bash
python3 -m pytest -k "not broken_on_purpose" /tests/test_outputs.py -rA
