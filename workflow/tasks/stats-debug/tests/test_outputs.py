"""Verifier of stats-debug: each function on several inputs (mean was never broken)."""

import inspect
import sys

import pytest

sys.path.insert(0, "/app")
import stats  # noqa: E402


@pytest.mark.parametrize("values,expected", [([1, 2, 3], 2), ([2.5], 2.5), ([-1, 1, 4, 8], 3)])
def test_mean(values, expected):
    assert stats.mean(values) == pytest.approx(expected)


@pytest.mark.parametrize("values,expected", [([5, 1, 3], 3), ([4, 1, 3, 2], 2.5), ([7, 7], 7)])
def test_median(values, expected):
    assert stats.median(values) == pytest.approx(expected)


@pytest.mark.parametrize(
    "values,expected", [([1, 2, 3, 4], 5 / 3), ([2, 4, 4, 4, 5, 5, 7, 9], 32 / 7)]
)
def test_variance(values, expected):
    assert stats.variance(values) == pytest.approx(expected)


@pytest.mark.parametrize("p,expected", [(0, 1), (50, 2.5), (90, 3.7), (100, 4)])
def test_percentile(p, expected):
    assert stats.percentile([4, 1, 3, 2], p) == pytest.approx(expected)


def test_signatures_unchanged():
    assert list(inspect.signature(stats.percentile).parameters) == ["values", "p"]
