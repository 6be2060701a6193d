#!/bin/bash
bash $TEST_DIR/check.sh
