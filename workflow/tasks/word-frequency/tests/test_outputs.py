"""Verifier of word-frequency: run /app/wordfreq.sh on fixed inputs."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path("/app/wordfreq.sh")

CASES = {
    "simple": ("b a b c b a", 2, "3 b\n2 a\n"),
    "ties": ("pear apple pear apple fig", 3, "2 apple\n2 pear\n1 fig\n"),
    "case_and_punctuation": ("The cat. THE dog, the END!", 1, "3 the\n"),
    "digits_split_words": ("ab1ab 2ab cd", 2, "3 ab\n1 cd\n"),
    "n_larger_than_words": ("one two", 5, "1 one\n1 two\n"),
}


def run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=20)


def test_script_is_executable():
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)


def test_script_has_bash_shebang():
    assert (
        SCRIPT.read_text().splitlines()[0].startswith("#!")
        and "bash" in SCRIPT.read_text().splitlines()[0]
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_output(case, tmp_path):
    text, n, expected = CASES[case]
    f = tmp_path / "input.txt"
    f.write_text(text)
    result = run(str(f), str(n))
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected


def test_missing_file_fails():
    result = run("/nonexistent/file.txt", "3")
    assert result.returncode != 0
    assert result.stderr.strip() != ""
