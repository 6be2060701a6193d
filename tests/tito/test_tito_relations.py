"""The boundary relations as pure functions on id arrays (hand-made ids: no tokenizer involved)."""

from __future__ import annotations

import numpy as np

from t1.tito import relations as R


def a(*xs):
    return np.asarray(xs, np.int32)


def test_common_prefix_and_suffix():
    assert R.common_prefix(a(1, 2, 3), a(1, 2, 4, 5)) == 2
    assert R.common_prefix(a(), a(1)) == 0
    assert R.common_suffix(a(1, 2, 3), a(9, 2, 3)) == 2
    assert R.common_suffix(a(1), a()) == 0


def test_strict():
    assert R.is_strict(a(1, 2), a(1, 2, 3))
    assert R.is_strict(a(), a(1))
    assert not R.is_strict(a(1, 2), a(1))
    assert not R.is_strict(a(1, 2), a(1, 3, 2))


def _normalized(S, mask, P, back=96, ahead=16):
    return R.is_normalized(S, np.asarray(mask, bool), P, R.common_prefix(S, P), back, ahead)


def test_normalized_needs_a_glue_only_tail():
    S = a(1, 2, 3, 7, 8, 9)  # 1 2 3 sampled, then glue 7 8 9
    sampled = [0, 1, 1, 1, 0, 0]
    assert _normalized(S, [0, 0, 0, 1, 0, 0], a(1, 2, 3, 7, 9, 10, 11))  # 8 dropped
    assert _normalized(S, [0, 0, 0, 1, 0, 0], a(1, 2, 3, 7, 5, 8, 9, 10))  # 5 added
    assert not _normalized(S, sampled, a(1, 2, 4, 7, 8, 9))  # diverges inside sampled ids
    assert not _normalized(S, [0, 0, 0, 1, 0, 0], a(1, 2, 3, 7, 4, 4))  # never agrees again


def test_normalized_window_is_bounded():
    glue = list(range(100, 120))
    S = a(1, *glue)
    mask = [1] + [0] * len(glue)
    P = a(1, 50, *glue[1:], 60)  # first glue token replaced
    assert _normalized(S, mask, P)
    assert not _normalized(S, mask, P, back=10)  # divergence 20 tokens back > I
    P = a(1, 100, *range(200, 220), *glue[1:], 60)  # 20 tokens inserted
    assert _normalized(S, mask, P, ahead=20)
    assert not _normalized(S, mask, P, ahead=16)  # re-synchronizes only beyond J


def test_retokenized_cut_by_text():
    vocab = {1: "<s>", 2: "l", 3: "s", 4: "ls", 5: " x", 6: "!"}

    def decode(ids):
        return "".join(vocab[int(i)] for i in ids)

    special = np.zeros(7, bool)
    special[1] = True
    S = a(1, 2, 3)  # "<s>" "l" "s"
    P = a(1, 4, 5, 6)  # "<s>" "ls" " x" "!"
    assert R.retokenized_cut(S, P, R.common_prefix(S, P), decode, special) == 2
    P = a(1, 5, 6)
    assert R.retokenized_cut(S, P, R.common_prefix(S, P), decode, special) is None
