"""t1.eval.stats against hand-computed values: Wilson score intervals and unbiased pass@k.

pytest tests/test_stats.py -q
"""

from __future__ import annotations

import math

import pytest

from t1.eval.stats import Z95, mean_pass_at_k, pass_at_k, wilson_interval


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # 0/10: low 0, high = (z²/n) / (1 + z²/n) = 0.384146 / 1.384146
        (0, 10, 0.0, 0.277533),
        # 5/10: centre 0.5, half = z / 1.384146 * sqrt(0.025 + 0.0096037) = 0.263406
        (5, 10, 0.236594, 0.763406),
        (10, 10, 0.722467, 1.0),
        # 1/1: centre (1 + z²/2) / (1 + z²), half (z²/2) / (1 + z²): low = 1 / (1 + z²) = 0.206549
        (1, 1, 0.206549, 1.0),
        # 3/20: centre (0.15 + 0.096036) / 1.192073 = 0.206394, half 0.154025
        (3, 20, 0.052369, 0.360419),
    ],
)
def test_wilson_interval_matches_hand_computed_bounds(successes, n, low, high):
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=1e-5) and hi == pytest.approx(high, abs=1e-5)


def test_wilson_interval_is_not_the_wald_interval():
    # Wald's interval at 0/10 is the point [0, 0]; Wilson's keeps a real upper bound
    p, n = 0.0, 10
    wald_high = p + Z95 * math.sqrt(p * (1 - p) / n)
    assert wald_high == 0.0 and wilson_interval(0, n)[1] > 0.25


def test_wilson_interval_shrinks_with_n_and_contains_the_rate():
    widths = []
    for n in (10, 100, 1000):
        lo, hi = wilson_interval(n // 5, n)
        assert lo < 0.2 < hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]


@pytest.mark.parametrize(("successes", "n"), [(0, 0), (-1, 5), (6, 5)])
def test_wilson_interval_refuses_impossible_counts(successes, n):
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 0, 1, 0.0),
        (10, 10, 1, 1.0),
        (5, 2, 1, 0.4),  # pass@1 is c/n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (5, 2, 4, 1.0),  # n - c = 3 < 4: every draw of 4 holds a success
        (4, 1, 4, 1.0),
        (10, 1, 5, 0.5),  # 1 - C(9,5)/C(10,5) = 1 - 126/252
    ],
)
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 1, 0), (3, 4, 1), (3, -1, 1)])
def test_pass_at_k_refuses_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_tasks():
    # two tasks: pass@2 of (5, 2) is 0.7, of (5, 0) is 0
    assert mean_pass_at_k([(5, 2), (5, 0)], 2) == pytest.approx(0.35)
    with pytest.raises(ValueError):
        mean_pass_at_k([], 1)
