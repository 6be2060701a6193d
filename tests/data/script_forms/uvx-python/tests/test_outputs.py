import sys
from pathlib import Path


def test_interpreter_asked_for():
    assert sys.version_info[:2] == (3, 11)


def test_answer():
    assert Path("/app/n.txt").read_text().strip() == "3"
