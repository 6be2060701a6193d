import os
from pathlib import Path


def test_runs_in_the_build_dir():
    assert os.getcwd() == "/app/build"


def test_result_relative_to_cwd():
    assert Path("result.txt").read_text().strip() == "built"
