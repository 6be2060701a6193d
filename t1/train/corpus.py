"""The pre-training corpus: solved family tasks as agent transcripts, generated, not executed.

    from t1.train.corpus import corpus_rows
    rows = corpus_rows(cfg, tokenizer)     # cfg.pretrain.examples rows (t1.train.batch.Row)

Used by `t1 train --stage pretrain` (t1/train/pretrain.py). Each row is the token stream the
agent loop (t1.agent.loop) would record for an expert that solves a random instance of a task
family (t1.tasks.families): the system prompt with the bash tool, the instruction, the tool
call `cd /app`, its observation, the family's one command, its observation, the final answer
(the expert's turns, t1.agent.expert). Built with the same chat glue (t1.agent.chat.next_prompt) as a
rollout, so the stream is exactly what TITO assembles from an executed expert trajectory; the
loss covers the assistant's tokens only. Nothing runs: every observation is the empty output
with exit code 0, which is what each family's command prints when it succeeds. This is the
cheap, unvalidated half of the data (thousands of transcripts per second); SFT then trains on
executed, verified expert trajectories of the training pool.

Rows: with probability `pretrain.full_fraction` a full transcript, else `pretrain.pack`
transcripts without their system turn, back to back in one row (the system prompt is ~190 of
a transcript's ~290 tokens: packing trains on several times more tool calls per token; the
tiny policy learns to copy a file name from the instruction into its command on packed rows
long before it does on full ones). `pretrain.examples` counts transcripts, packed or not.

Near misses: a share `pretrain.near_miss_share` of the transcripts (each family alike, drawn
from its own random stream) types the family's near miss instead of its command: one edit
away, silent, and failing the instance's tests (`wc -l SRC.txt > DST.txt` for the number of
lines: "N SRC.txt"; `mv` for a copy, `cp` for a rename). Their observations are as true as the
others' (empty, exit 0). The pre-trained prior then holds the right command and a wrong one for
every family, as a base model's prior holds many ways to do a thing, only some of which pass
a verifier; SFT's experts and PPO's reward have that choice to make. At a share of 0 nothing
is drawn from that stream, so the rows are exactly those drawn without the key.

No held-out instance of the run (t1.tasks.families.make_split with the run's seed and sizes)
is ever in the corpus: instances are drawn until none collides with one.

Names: a fraction `pretrain.synthetic_names` (0 in the tiny config: its effect on the campaign
is not measured yet; LOG.md) of the transcripts name their files with made-up words
(t1.tasks.families.synthetic_name: random syllables or letters, several tokens each, a fresh
set per transcript), the rest with the run's word pool (`families.words`). A policy trained
only on the pool's 24 words recalls one of them for a name it never saw (0 of 64 instances of
the `heldout_unseen` split resolved): with made-up names the only way to the right command is
to copy the name from the instruction. No made-up name holds a word of UNSEEN_WORDS.
"""

from __future__ import annotations

import random
from typing import Any

from t1.agent import chat
from t1.agent.expert import FINAL_ANSWER
from t1.agent.loop import SYSTEM_SUFFIX, format_observation
from t1.agent.tokenizer import IM_START
from t1.config import Config
from t1.tasks.families import FAMILIES, WORKDIR, Instance, key_of, make_split
from t1.tasks.family_corpus import draw_corpus
from t1.train.batch import Row


def transcript(tokenizer: Any, inst: Instance, near_miss: bool = False) -> Row:
    """The agent's token stream for an expert solving `inst`; loss on the sampled tokens.
    `near_miss`: the family's near miss instead of its command (a transcript that fails)."""
    system = chat.SYSTEM_PROMPT + SYSTEM_SUFFIX.format(workdir=WORKDIR)
    ids = chat.prompt_ids(tokenizer, chat.initial_messages(inst.instruction_md(), system))
    mask = [False] * len(ids)
    im_end = chat.glue_of(tokenizer).im_end
    observation = format_observation(0, "", False)
    for command in [f"cd {WORKDIR}", *inst.commands(near_miss)]:
        sampled = chat.encode(tokenizer, chat.tool_call_text(command)) + [im_end]
        _, appended = chat.next_prompt(tokenizer, ids, sampled, observation)
        ids = ids + sampled + appended
        mask += [True] * len(sampled) + [False] * len(appended)
    final = chat.encode(tokenizer, FINAL_ANSWER) + [im_end]
    ids += final
    mask += [True] * len(final)
    meta = {"task_id": inst.task_id, "category": inst.fam.category, "family": inst.family}
    if near_miss:
        meta["near_miss"] = True
    return Row(ids, mask, None, None, 0.0, meta)


def heldout_keys(cfg: Config) -> set[str]:
    fc = cfg.families
    split = make_split(cfg.run.seed, fc.train, fc.heldout, list(fc.names) or None, fc.words)
    return {key_of(i.family, i.params) for i in split["heldout"]}


def without_system(tokenizer: Any, row: Row) -> Row:
    """`row` from its first user turn on (the system turn dropped)."""
    im_start = tokenizer.convert_tokens_to_ids(IM_START)
    starts = [i for i, t in enumerate(row.ids) if t == im_start]
    k = starts[1]
    return Row(list(row.ids[k:]), list(row.loss_mask[k:]), None, None, 0.0, dict(row.meta))


def corpus_rows(cfg: Config, tokenizer: Any) -> list[Row]:
    """`cfg.pretrain.examples` transcripts, none of them a held-out instance of this run."""
    p = cfg.pretrain
    if not 0.0 <= p.full_fraction <= 1.0 or p.pack < 1:
        raise ValueError(f"pretrain.full_fraction must be in [0, 1] and pack >= 1, got {p}")
    synthetic = p.synthetic_names
    if not 0.0 <= synthetic <= 1.0:
        raise ValueError(f"pretrain.synthetic_names must be in [0, 1], got {synthetic}")
    if not 0.0 < p.rare_share <= 1.0:
        raise ValueError(f"pretrain.rare_share must be in (0, 1], got {p.rare_share}")
    unknown = sorted(set(p.rare_families) - set(FAMILIES))
    if unknown:
        raise ValueError(
            f"pretrain.rare_families: no such family {unknown}; families: {sorted(FAMILIES)}"
        )
    if not 0.0 <= p.near_miss_share < 1.0:
        raise ValueError(f"pretrain.near_miss_share must be in [0, 1), got {p.near_miss_share}")
    rare = {name: p.rare_share for name in p.rare_families}
    keys = heldout_keys(cfg)
    insts = draw_corpus(cfg.run.seed, p.examples, keys, cfg.families.words, synthetic, rare)
    rng = random.Random(f"t1-pretrain-rows-{cfg.run.seed}")
    misses = random.Random(f"t1-pretrain-near-misses-{cfg.run.seed}")  # share 0: never drawn
    rows: list[Row] = []
    pending: list[Row] = []
    for inst in insts:
        near = p.near_miss_share > 0 and misses.random() < p.near_miss_share
        row = transcript(tokenizer, inst, near)
        if p.pack == 1 or rng.random() < p.full_fraction:
            rows.append(row)
            continue
        pending.append(without_system(tokenizer, row))
        if len(pending) == p.pack:
            rows.append(_concat(pending))
            pending = []
    if pending:
        rows.append(_concat(pending))
    return rows


def _concat(parts: list[Row]) -> Row:
    ids: list[int] = []
    mask: list[bool] = []
    for r in parts:
        ids += list(r.ids)
        mask += [bool(m) for m in r.loss_mask]
    meta = {"task_id": "+".join(r.meta["task_id"] for r in parts), "category": "packed"}
    return Row(ids, mask, None, None, 0.0, meta)
