"""Drawing the pre-training corpus's instances from the task families (t1.tasks.families).

    from t1.tasks.family_corpus import draw_corpus
    insts = draw_corpus(seed, n, exclude=heldout_keys, words=24, synthetic=0.5, rare={"sort-lines": 0.07})

Used by the pre-training corpus (t1.train.corpus) and the tokenizer's training text
(t1.agent.tokenizer_train).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping

from t1.tasks.families import FAMILIES, Instance, key_of
from t1.tasks.family_words import synthetic_name, word_pool


def draw_corpus(
    seed: int,
    n: int,
    exclude: set[str],
    words: int = 0,
    synthetic: float = 0.0,
    rare: Mapping[str, float] | None = None,
) -> Iterator[Instance]:
    """`n` random instances over all families, none of whose keys is in `exclude`. With
    probability `synthetic` an instance draws from 8 fresh `synthetic_name`s instead of the
    word pool: names it can only copy from the instruction, never recall from a list.

    Families take turns; `rare` maps a family to its share of a turn (0 < share <= 1): at 0.1
    it holds a tenth of the transcripts another family holds, decided by its own random stream
    (`rare` empty draws exactly what it always drew)."""
    rare = dict(rare or {})
    for name, share in rare.items():
        if name not in FAMILIES or not 0.0 < share <= 1.0:
            raise ValueError(
                f"rare family {name!r}: a family of {sorted(FAMILIES)} with a share in (0, 1], got {share}"
            )
    pool = word_pool(words)
    r = random.Random(f"t1-corpus-{seed}")
    fresh = random.Random(f"t1-corpus-names-{seed}")  # synthetic 0 draws what it always drew
    turns = random.Random(f"t1-corpus-rare-{seed}")
    names = list(FAMILIES)
    i = k = 0
    while i < n:
        name = names[k % len(names)]
        if name in rare and turns.random() >= rare[name]:
            k += 1
            continue
        made_up: set[str] = set()
        while synthetic > 0 and len(made_up) < 8 and (made_up or fresh.random() < synthetic):
            made_up.add(synthetic_name(fresh))
        p = FAMILIES[name].draw(r, tuple(sorted(made_up)) or pool)
        if key_of(name, p) in exclude:
            continue
        yield Instance(name, p, i)
        i += 1
        k += 1
