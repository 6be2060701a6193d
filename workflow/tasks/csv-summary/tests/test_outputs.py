"""Verifier of csv-summary: both reports, value by value."""

import csv
import hashlib
import json
import os
from pathlib import Path

import pytest

REPORTS = Path("/app/reports")
SALES_SHA256 = "ef35bf9c130e4e9e8686940a369c04c17a21d4bcaa1f533d870133a710914008"


def summary():
    return json.loads((REPORTS / "summary.json").read_text())


def test_report_dir_from_environment():
    assert os.environ.get("REPORT_DIR") == "/app/reports"


def test_input_unchanged():
    assert hashlib.sha256(Path("/app/data/sales.csv").read_bytes()).hexdigest() == SALES_SHA256


def test_summary_is_json_object():
    assert isinstance(summary(), dict)


def test_total_revenue():
    assert summary()["total_revenue"] == pytest.approx(841.40, abs=0.005)


@pytest.mark.parametrize(
    "region,revenue",
    [("north", 163.98), ("south", 230.97), ("east", 237.5), ("west", 208.95)],
)
def test_region_revenue(region, revenue):
    assert summary()["by_region"][region] == pytest.approx(revenue, abs=0.005)


def test_no_other_regions():
    assert sorted(summary()["by_region"]) == ["east", "north", "south", "west"]


def test_top_product():
    assert summary()["top_product"] == "widget"


def test_by_month_rows():
    rows = list(csv.reader((REPORTS / "by_month.csv").open()))
    assert rows == [
        ["month", "revenue"],
        ["2024-01", "201.47"],
        ["2024-02", "299.98"],
        ["2024-03", "339.95"],
    ]
