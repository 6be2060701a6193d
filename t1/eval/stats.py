"""Interval and pass@k math of an evaluation: pure functions, no I/O.

    from t1.eval.stats import wilson_interval, pass_at_k
    wilson_interval(5, 10)      # (0.2366, 0.7634): 95% Wilson score interval of 5 of 10
    pass_at_k(n=5, c=2, k=2)    # 0.7: unbiased pass@2 of a task run 5 times, resolved twice

`t1 evaluate` (t1/eval/evaluate.py) reports the resolved rate of its trajectories with the Wilson
score interval (Wilson 1927), not the normal ("Wald") interval: at the rates a tiny policy has
(0 of 10, 1 of 12) Wald's interval collapses to a point or leaves [0, 1], Wilson's does not.
pass@k is the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
on Code", eq. 1): a task run n times and resolved c times has pass@k = 1 - C(n-c, k) / C(n, k),
the chance that k of its n runs drawn without replacement hold at least one success; a task
set's pass@k is the mean over its tasks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `successes / n` (95% for the default z).

    low = (p + z²/2n - z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), high likewise with +.
    Raises ValueError for n < 1 or successes outside [0, n] (no interval of nothing)."""
    if n < 1:
        raise ValueError(f"a Wilson interval needs n >= 1 trials, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clamp the rounding at the ends: 0 of n has low exactly 0, n of n high exactly 1
    return (
        0.0 if successes == 0 else max(0.0, center - half),
        1.0 if successes == n else min(1.0, center + half),
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task run `n` times with `c` resolved runs (Chen et al. 2021).

    1 - C(n-c, k) / C(n, k), exact in integers; 1.0 when n - c < k (every draw of k holds a
    success). Raises ValueError unless 1 <= k <= n and 0 <= c <= n."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"resolved runs must lie in [0, n={n}], got c={c}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """The task set's pass@k: the mean of `pass_at_k(n, c, k)` over (n, c) per task.

    Raises ValueError on an empty set, or when a task ran fewer than k times."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("pass@k of an empty task set")
    return sum(values) / len(values)


def intervals_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def two_proportion_test(x1: int, n1: int, x2: int, n2: int) -> dict[str, Any]:
    """Pooled two-proportion z-test of p2 vs p1, two-sided: {"z", "p"} (None when undefined:
    an empty group, or both rates 0 or both 1)."""
    if n1 == 0 or n2 == 0:
        return {"z": None, "p": None}
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return {"z": None, "p": None}
    z = (x2 / n2 - x1 / n1) / se
    return {"z": z, "p": math.erfc(abs(z) / math.sqrt(2))}


def mcnemar_exact(only_first: int, only_second: int) -> dict[str, Any]:
    """Exact McNemar test of paired binary outcomes (the same items under two conditions), two-
    sided: of the discordant pairs, `only_first` succeeded under the first condition alone and
    `only_second` under the second alone; under the null each discordant pair goes either way
    with probability 1/2. {"p"} (1.0 with no discordant pair)."""
    if only_first < 0 or only_second < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_first}, {only_second}")
    n, k = only_first + only_second, min(only_first, only_second)
    if n == 0:
        return {"p": 1.0}
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return {"p": min(1.0, 2 * tail)}
