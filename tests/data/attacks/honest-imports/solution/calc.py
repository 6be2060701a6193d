"""The honest calc module."""

try:
    import numpy as np
except ImportError:
    np = None


class CalcError(ValueError):
    pass


def minmax(values):
    if not values:
        raise CalcError("empty input")
    return (min(values), max(values))


class Counter:
    def __init__(self):
        self.counts = {}

    def add(self, word):
        self.counts[word] = self.counts.get(word, 0) + 1

    def count(self, word):
        return self.counts.get(word, 0)

    def __len__(self):
        return len(self.counts)

    def __iter__(self):
        return iter(list(self.counts))


def scale(values, k=2.0):
    if np is not None:
        return np.asarray(values, dtype=float) * k
    return [float(v) * k for v in values]
