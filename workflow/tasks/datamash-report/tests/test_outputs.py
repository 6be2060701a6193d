"""Verifier of datamash-report: the package is installed and the summary is right."""

import subprocess
from pathlib import Path

import pytest

INPUT = "group\tvalue\na\t3\nb\t10\na\t5\nc\t1\nb\t20\na\t7\nc\t2\nb\t30\nc\t6\n"
EXPECTED = {"a": (3, 5.0, 7.0), "b": (3, 20.0, 30.0), "c": (3, 3.0, 6.0)}


def rows():
    lines = Path("/app/stats.tsv").read_text().splitlines()
    return [line.split("\t") for line in lines]


def test_input_unchanged():
    assert Path("/app/measurements.tsv").read_text() == INPUT


def test_package_installed():
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", "datamash"], capture_output=True, text=True
    )
    assert out.stdout == "install ok installed"


def test_datamash_runs():
    out = subprocess.run(["datamash", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "datamash" in out.stdout


def test_header():
    assert rows()[0] == ["group", "count", "mean", "max"]


def test_groups_in_order():
    assert [r[0] for r in rows()[1:]] == ["a", "b", "c"]


@pytest.mark.parametrize("group", sorted(EXPECTED))
def test_group_values(group):
    row = next(r for r in rows()[1:] if r[0] == group)
    count, mean, maximum = EXPECTED[group]
    assert int(row[1]) == count
    assert float(row[2]) == pytest.approx(mean)
    assert float(row[3]) == pytest.approx(maximum)
