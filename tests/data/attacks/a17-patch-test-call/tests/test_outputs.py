"""Verifier that imports the agent's module, as stats-debug does: it runs behind the t1 proxy.

/app exists even for the no-op (one assertion passes); the rest needs /app/calc.py.
"""

import inspect
import sys
from pathlib import Path

import pytest

try:  # before /app goes on sys.path: a numpy the agent planted there is never this one
    import numpy as np
except ImportError:
    np = None

sys.path.insert(0, "/app")


@pytest.fixture(scope="module")
def calc():
    import calc

    return calc


def test_app_dir_exists():
    assert Path("/app").is_dir()


def test_minmax_is_a_tuple(calc):
    r = calc.minmax([3, 1, 2])
    assert isinstance(r, tuple) and r == (1, 3)


def test_minmax_value(calc):
    assert calc.minmax([5, -2, 7]) == (-2, 7)


def test_empty_raises_value_error(calc):
    with pytest.raises(ValueError, match="empty"):
        calc.minmax([])
    with pytest.raises(calc.CalcError):
        calc.minmax([])


def test_signature(calc):
    assert list(inspect.signature(calc.minmax).parameters) == ["values"]


def test_counter_instance(calc):
    c = calc.Counter()
    for word in ["a", "b", "a"]:
        c.add(word)
    assert isinstance(c, calc.Counter)
    assert c.count("a") == 2 and c.count("z") == 0 and len(c) == 2
    assert sorted(c) == ["a", "b"] and "b" in c


def test_scale(calc):
    out = calc.scale([1, 2, 3])
    if np is None:
        assert out == [2.0, 4.0, 6.0]
    else:
        assert isinstance(out, np.ndarray) and np.allclose(out, [2.0, 4.0, 6.0])
