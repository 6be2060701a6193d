"""Small statistics helpers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


def variance(values):
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)


def percentile(values, p):
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    return s[lo]
