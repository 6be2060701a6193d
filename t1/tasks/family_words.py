"""The words task families name things with: the pool, the unseen pool, and made-up names.

    from t1.tasks.family_words import WORDS, UNSEEN_WORDS, word_pool, synthetic_name

WORDS: the pool the train and held-out instances draw from (`families.words` of them).
UNSEEN_WORDS: the `heldout_unseen` split's words, in no training stage. synthetic_name: names
made up per instance (the pre-training corpus, `families.train_made_up`), never a word of
either pool. Used by t1.tasks.families, which re-exports them.
"""

from __future__ import annotations

import random

# Short, common words: file names, directory names and contents are drawn from these.
WORDS = (
    "apple", "amber", "anchor", "arrow", "aspen", "badge", "basil", "beach", "berry", "birch",
    "blade", "bloom", "board", "brick", "brook", "cabin", "candle", "canyon", "cedar", "chalk",
    "cherry", "cliff", "cloud", "clover", "coast", "comet", "coral", "cotton", "crane", "creek",
    "crown", "daisy", "delta", "desert", "dune", "eagle", "ember", "fable", "falcon", "fern",
    "field", "flame", "flint", "forest", "frost", "garden", "ginger", "glacier", "grape",
    "harbor", "hazel", "heron", "hill", "honey", "island", "ivory", "jade", "jasmine", "jungle",
    "kettle", "lagoon", "lake", "lantern", "lemon", "lilac", "linen", "lotus", "maple",
    "marble", "meadow", "mint", "moss", "night", "oak", "ocean", "olive", "orchid", "otter",
    "pebble", "pepper", "pine", "planet", "plum", "pond", "poppy", "prism", "quartz", "rain",
    "raven", "reef", "ridge", "river", "robin", "rose", "saffron", "sage", "sand", "shadow",
    "shell", "silver", "slate", "snow", "spark", "spruce", "star", "stone", "storm", "summit",
    "sun", "swan", "thistle", "thunder", "tiger", "timber", "topaz", "tulip", "valley",
    "velvet", "violet", "walnut", "willow", "wind", "winter", "wolf", "zephyr",
)  # fmt: skip
# Words of the `heldout_unseen` split: never in a training instance, the tokenizer corpus, the
# pre-training corpus or the train pool (tests/test_families_unseen.py scans them), and each
# 2-7 tokens of the trained BPE (none is a token of its own).
UNSEEN_WORDS = (
    "gadget", "llama", "walrus", "banjo", "pixel", "quiver", "yogurt", "muffin", "noodle",
    "pretzel", "waffle", "tundra", "igloo", "jigsaw", "kayak", "lychee", "mango", "nectar",
    "oyster", "parsnip", "quokka", "radish", "squid", "trombone", "vortex", "wombat", "yacht",
    "zucchini", "bagpipe", "cactus", "dolphin", "gecko",
)  # fmt: skip
assert not set(UNSEEN_WORDS) & set(WORDS)


Words = tuple[str, ...]


def word_pool(n: int) -> Words:
    """The words instances draw from: the first `n` of WORDS (0 = all; `families.words`)."""
    if n < 0 or n == 1 or n == 2 or n > len(WORDS):
        raise ValueError(f"families.words must be 0 (all {len(WORDS)}) or 3..{len(WORDS)}, got {n}")
    return WORDS[:n] if n else WORDS


_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v",
           "w", "x", "y", "z", "bl", "br", "ch", "cr", "dr", "fl", "gl", "gr", "kn", "pl", "pr",
           "sh", "sk", "sl", "sn", "sp", "st", "sw", "th", "tr", "wh")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "oo", "ou", "ie", "oa")
_CODAS = ("", "", "", "b", "ck", "d", "ff", "g", "k", "l", "ll", "m", "mp", "n", "nd", "ng",
          "nk", "p", "r", "rk", "rn", "rt", "s", "sh", "sk", "ss", "st", "t", "tch", "x", "z")  # fmt: skip


def synthetic_name(r: random.Random) -> str:
    """A made-up name the tokenizer splits into several tokens: 1-3 random syllables, or 4-8
    random letters. Never a word of WORDS or UNSEEN_WORDS, nor one holding an unseen word."""
    while True:
        if r.random() < 0.7:
            syllables = r.randint(1, 3)
            w = "".join(r.choice(_ONSETS) + r.choice(_VOWELS) + r.choice(_CODAS)
                        for _ in range(syllables))  # fmt: skip
        else:
            w = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(4, 8)))
        if 4 <= len(w) <= 10 and w not in WORDS and not any(u in w for u in UNSEEN_WORDS):
            return w
