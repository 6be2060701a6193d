"""The copy warm-up: rows that can only be predicted by copying, before the pre-training corpus.

    from t1.train.copy_warmup import copy_rows
    rows = copy_rows(cfg, tokenizer)     # pretrain.copy_steps x pretrain.copy_batch rows

A policy that types a file name it never saw must copy it, token by token, from the instruction
into its command: for the tiny MoE that means an induction circuit (attend to where the current
token appeared before, emit what followed it). On the family transcripts alone it does not form
within the campaign's pre-training budget: after 352 steps on transcripts named with made-up
words, greedy decoding types 0 of 64 `heldout_unseen` commands and 0 of 32 made-up ones (it
writes syllables of its own: `echo sl > sloor.txt`). Each row here is a list of 3-8 made-up
names (t1.tasks.families.synthetic_name, some with `.txt` / `.log`), ` >`, and the same list
again, the loss on the repeat only: nothing in the repeat is predictable except by copying. On
the tiny MoE the copy accuracy sits near 20 % for ~450 steps of 32 rows, then jumps to 98 % by
step 700 (the induction phase change); pre-training on the transcripts after it transfers the
copy to the agent's format (LOG.md, 2026-12-03: 39 of 64 unseen commands).

Made-up names never hold a word of UNSEEN_WORDS or WORDS (synthetic_name), so no stage sees an
unseen word through this corpus either. The rows come from the config's seed: a rerun makes the
same rows.
"""

from __future__ import annotations

import random
from typing import Any

from t1.config import Config
from t1.tasks.families import synthetic_name
from t1.train.batch import Row

SUFFIXES = ("", "", ".txt", ".log")  # bare names twice as often, as in the families' commands
SEPARATOR = " >"


def exercise(tokenizer: Any, r: random.Random) -> Row:
    """One row: ` n1 n2 ... nk >` then ` n1 n2 ... nk` (k in 3..8), loss on the second list."""
    names = " " + " ".join(synthetic_name(r) + r.choice(SUFFIXES) for _ in range(r.randint(3, 8)))
    first = tokenizer.encode(names + SEPARATOR, add_special_tokens=False)
    again = tokenizer.encode(names, add_special_tokens=False)
    ids = first + again
    mask = [False] * len(first) + [True] * len(again)
    return Row(ids, mask, None, None, 0.0, {"task_id": "copy", "category": "copy"})


def copy_rows(cfg: Config, tokenizer: Any) -> list[Row]:
    """`pretrain.copy_steps * pretrain.copy_batch` exercises from the run's seed."""
    p = cfg.pretrain
    if p.copy_steps < 0 or p.copy_batch < 1:
        raise ValueError(
            f"pretrain.copy_steps must be >= 0 and copy_batch >= 1, got {p.copy_steps}, "
            f"{p.copy_batch}"
        )
    r = random.Random(f"t1-copy-warmup-{cfg.run.seed}")
    return [exercise(tokenizer, r) for _ in range(p.copy_steps * p.copy_batch)]
