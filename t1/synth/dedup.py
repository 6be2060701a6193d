"""Near-duplicate detection: MinHash signatures over word shingles, LSH banding.

    sig = minhash(shingles(task_text(task_dir)))        # 64 values, stable across hosts
    similarity(sig_a, sig_b)                             # estimated Jaccard, 0..1
    nearest([sig, ...])                                  # per task: (best similarity, index)

Used by `t1 audit` (novelty) and `t1 pool` (duplicate removal). A task's text is its
instruction, reference solution and tests; shingles are 5-word windows of its lowercased
words and punctuation. Hashing uses blake2b, so signatures do not depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np


def shingles(text: str, k: int = 5) -> set[str]:
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    return {" ".join(words[i : i + k]) for i in range(max(1, len(words) - k + 1))}


_P = (1 << 31) - 1  # a Mersenne prime; a*h + b < 2**63 for 32-bit h and a, b < p


def _params(n: int) -> tuple[np.ndarray, np.ndarray]:
    def h(tag: str, bits: int) -> int:
        return int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "little") % (
            1 << bits
        )

    a = np.array([1 + h(f"a{i}", 62) % (_P - 1) for i in range(n)], dtype=np.uint64)
    b = np.array([h(f"b{i}", 62) % _P for i in range(n)], dtype=np.uint64)
    return a, b


_AB = _params(64)


def minhash(sh: set[str], n: int = 64) -> list[int]:
    """MinHash signature (n values) of a shingle set: min over shingles of (a*h + b) mod p for
    n fixed (a, b), h a 32-bit blake2b hash; deterministic across runs and hosts."""
    a, b = _AB if n == 64 else _params(n)
    if not sh:
        return [_P] * n
    hs = np.fromiter(
        (int.from_bytes(hashlib.blake2b(s.encode(), digest_size=4).digest(), "little") for s in sh),
        dtype=np.uint64,
        count=len(sh),
    )
    return [int(x) for x in ((a[:, None] * hs[None, :] + b[:, None]) % np.uint64(_P)).min(axis=1)]


def similarity(s1: list[int], s2: list[int]) -> float:
    return sum(a == b for a, b in zip(s1, s2, strict=True)) / len(s1)


def nearest(sigs: list[list[int]], bands: int = 16) -> list[tuple[float, int]]:
    """For each signature: (highest estimated Jaccard with another, its index; -1 if none).
    Candidate pairs come from LSH banding; pairs sharing no band count as similarity 0."""
    rows = len(sigs[0]) // bands if sigs else 0
    buckets: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, s in enumerate(sigs):
        for b in range(bands):
            buckets.setdefault((b, tuple(s[b * rows : (b + 1) * rows])), []).append(i)
    best = [(0.0, -1)] * len(sigs)
    seen: set[tuple[int, int]] = set()
    for members in buckets.values():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                i, j = members[x], members[y]
                if (i, j) in seen:
                    continue
                seen.add((i, j))
                sim = similarity(sigs[i], sigs[j])
                if sim > best[i][0]:
                    best[i] = (sim, j)
                if sim > best[j][0]:
                    best[j] = (sim, i)
    return best


def task_text(task_dir: Path) -> str:
    """Instruction, solution and tests of a task directory, concatenated."""
    parts = []
    for rel in ("instruction.md", "solution/solve.sh", "tests/test_outputs.py"):
        p = task_dir / rel
        if p.is_file():
            parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)
