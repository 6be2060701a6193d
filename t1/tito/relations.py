"""TITO's turn-boundary relations as pure functions on id arrays (DESIGN §8).

    pytest tests/tito

S is the stream so far (int32 [L]) with its loss mask M (bool [L]); P is the prompt the engine
consumed for the next turn (int32 [n]). t1.tito tries the relations in this order and the first
admissible one decides:

* `is_strict(S, P)`             P[:L] == S.
* `is_normalized(S, M, P, c)`   c = common_prefix(S, P) lies at most `back` (I) tokens before
                                L, S[c:] holds no sampled token, and P agrees again: walking S[c:]
                                and P[c:] together, every mismatch re-synchronizes after skipping
                                i <= I tokens of S and j <= J tokens of P (the smallest i + j
                                first; (I + 1) x (J + 1) candidates per mismatch), confirmed by
                                the next two tokens. The stream becomes S[:c] + P[c:] (== P).
* `retokenized_cut(S, P, c)`    the c' with decode(S) == decode(P[:c']) although the ids differ;
                                P[:c'] is only used to find c' (it never enters the stream).
* otherwise split.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CONFIRM = 2  # tokens that must agree after a re-synchronization


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two id arrays."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def common_suffix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common suffix of two id arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[len(a) - n :][::-1] != b[len(b) - n :][::-1])
    return int(diff[0]) if diff.size else n


def is_strict(S: np.ndarray, P: np.ndarray) -> bool:
    """P extends S exactly."""
    return len(P) >= len(S) and bool(np.array_equal(P[: len(S)], S))


def is_normalized(
    S: np.ndarray, M: np.ndarray, P: np.ndarray, c: int, back: int, ahead: int
) -> bool:
    """S's glue tail after the common prefix `c` differs from P by small, local edits."""
    L, n = len(S), len(P)
    if c >= L or L - c > back or M[c:L].any():
        return False
    a, b = c, c
    while a < L:
        if b < n and S[a] == P[b]:
            a, b = a + 1, b + 1
            continue
        step = _resync(S, P, a, b, back, ahead)
        if step is None:
            return False
        a, b = a + step[0], b + step[1]
    return True


def _resync(
    S: np.ndarray, P: np.ndarray, a: int, b: int, back: int, ahead: int
) -> tuple[int, int] | None:
    """Smallest (i, j), i <= back, j <= ahead, after which S[a+i:] and P[b+j:] agree again."""
    L, n = len(S), len(P)
    for total in range(1, back + ahead + 1):
        for i in range(max(0, total - ahead), min(total, back) + 1):
            j = total - i
            q = min(CONFIRM, L - (a + i))
            if q <= 0 or b + j + q > n:
                continue
            if np.array_equal(S[a + i : a + i + q], P[b + j : b + j + q]):
                return i, j
    return None


def retokenized_cut(
    S: np.ndarray,
    P: np.ndarray,
    c: int,
    decode: Callable[[np.ndarray], str],
    special: np.ndarray,
) -> int | None:
    """c' such that decode(S) == decode(P[:c']) and P[:c'] != S, or None.

    `c` is common_prefix(S, P); `special` is a bool lookup over the vocabulary (True for
    special ids). Only the tails after the last special token before c are decoded: special
    tokens are ASCII, so the text splits there exactly on both sides.
    """
    L = len(S)
    specials_before = np.flatnonzero(special[S[:c]])
    c0 = int(specials_before[-1]) if specials_before.size else 0
    want = decode(S[c0:L])
    if not decode(P[c0:]).startswith(want):
        return None
    lo, hi = c0, len(P)  # smallest c' with len(decode(P[c0:c'])) >= len(want)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(P[c0:mid])) >= len(want):
            hi = mid
        else:
            lo = mid + 1
    for cut in range(lo, min(lo + 4, len(P)) + 1):
        text = decode(P[c0:cut])
        if text == want and not (cut == L and np.array_equal(P[:cut], S)):
            return cut
        if len(text) > len(want):
            break
    return None
