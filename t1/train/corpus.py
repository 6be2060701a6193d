"""The pre-training corpus: solved family tasks as agent transcripts, generated, not executed.

    from t1.train.corpus import corpus_rows
    rows = corpus_rows(cfg, tokenizer)     # cfg.pretrain.examples rows (t1.train.batch.Row)

Used by `t1 train --stage pretrain` (t1/train/pretrain.py). Each row is the token stream the
agent loop (t1.agent) would record for an expert that solves a random instance of a task
family (t1.tasks.families): the system prompt with the bash tool, the instruction, the tool
call `cd /app`, its observation, the family's one command, its observation, the final answer
(the expert's turns, t1.expert). Built with the same chat glue (t1.chat.next_prompt) as a
rollout, so the stream is exactly what TITO assembles from an executed expert trajectory; the
loss covers the assistant's tokens only. Nothing runs: every observation is the empty output
with exit code 0, which is what each family's command prints when it succeeds. This is the
cheap, unvalidated half of the data (thousands of transcripts per second); SFT then trains on
executed, verified expert trajectories of the training pool.

No held-out instance of the run (t1.tasks.families.make_split with the run's seed and sizes)
is ever in the corpus: instances are drawn until none collides with one.
"""

from __future__ import annotations

from typing import Any

from t1 import chat
from t1.agent import SYSTEM_SUFFIX, format_observation
from t1.config import Config
from t1.expert import FINAL_ANSWER
from t1.tasks.families import WORKDIR, Instance, draw_corpus, key_of, make_split
from t1.train.batch import Row


def transcript(tokenizer: Any, inst: Instance) -> Row:
    """The agent's token stream for an expert solving `inst`; loss on the sampled tokens."""
    system = chat.SYSTEM_PROMPT + SYSTEM_SUFFIX.format(workdir=WORKDIR)
    ids = chat.prompt_ids(tokenizer, chat.initial_messages(inst.instruction_md(), system))
    mask = [False] * len(ids)
    im_end = chat.glue_of(tokenizer).im_end
    observation = format_observation(0, "", False)
    for command in [f"cd {WORKDIR}", *inst.commands()]:
        sampled = chat.encode(tokenizer, chat.tool_call_text(command)) + [im_end]
        _, appended = chat.next_prompt(tokenizer, ids, sampled, observation)
        ids = ids + sampled + appended
        mask += [True] * len(sampled) + [False] * len(appended)
    final = chat.encode(tokenizer, FINAL_ANSWER) + [im_end]
    ids += final
    mask += [True] * len(final)
    meta = {"task_id": inst.task_id, "category": inst.fam.category, "family": inst.family}
    return Row(ids, mask, None, None, 0.0, meta)


def heldout_keys(cfg: Config) -> set[str]:
    fc = cfg.families
    split = make_split(cfg.run.seed, fc.train, fc.heldout, list(fc.names) or None)
    return {key_of(i.family, i.params) for i in split["heldout"]}


def corpus_rows(cfg: Config, tokenizer: Any) -> list[Row]:
    """`cfg.pretrain.examples` transcripts, none of them a held-out instance of this run."""
    insts = draw_corpus(cfg.run.seed, cfg.pretrain.examples, heldout_keys(cfg))
    return [transcript(tokenizer, inst) for inst in insts]
