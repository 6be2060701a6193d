"""Shared pieces of the agent and rollout tests: real policies that make multi-turn trajectories.

A randomly initialised policy almost never samples `<tool_call>` (1 id in ~4,100), so its
trajectories end after one turn. `tool_tag_policy` tunes ONLY the LM head of a fresh policy
(softmax regression on the frozen backbone's hidden states, a few seconds on the CPU) towards
the ids of `<tool_call>{"name": "bash", ...}</tool_call><|im_end|>` after each generation
prompt. The backbone stays random, so the head acts like a bigram model: nearly every turn it
samples opens with `<tool_call>` and closes with `</tool_call>`, usually as a malformed call
(an error observation, and the loop goes on). That gives real multi-turn trajectories from the
real engine (prefix cache, routing per turn, TITO boundaries) at no training cost.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.nn.functional as F

from t1.agent import chat
from t1.agent.loop import system_prompt_for
from t1.config import ModelConfig
from t1.model.policy import build_policy, save_policy
from t1.tasks.model import Task

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "workflow" / "tasks"

_CACHE: dict[tuple, torch.nn.Module] = {}


def example_tasks() -> list[Task]:
    from t1.rollout.collect import load_tasks

    return load_tasks([str(EXAMPLES)])


def random_policy(tokenizer, seed: int = 0) -> torch.nn.Module:
    """The config's default tiny MoE, freshly initialised, sized to `tokenizer`."""
    return build_policy(ModelConfig(), len(tokenizer), seed=seed)


def tool_tag_policy(
    tokenizer, tasks: list[Task], seed: int = 0, steps: int = 150
) -> torch.nn.Module:
    """A fresh policy whose LM head was fitted to answer every turn with a (bash) tool call.

    Returns a new copy each call (LocalEngine converts the module it is given to bf16)."""
    key = (id(tokenizer), tuple(t.id for t in tasks), seed, steps)
    if key in _CACHE:
        return copy.deepcopy(_CACHE[key])
    policy = build_policy(ModelConfig(), len(tokenizer), seed=seed)
    im_end = chat.glue_of(tokenizer).im_end
    call = chat.encode(tokenizer, chat.tool_call_text("ls")) + [im_end]
    feats, targets = [], []
    for task in tasks:
        prompt = chat.prompt_ids(
            tokenizer, chat.initial_messages(task.instruction, system_prompt_for(task))
        )
        nxt, appended = chat.next_prompt(tokenizer, prompt, call, "a.txt\n[exit code 0]")
        ids = nxt + call
        loss = [0] * len(prompt) + [1] * len(call) + [0] * len(appended) + [1] * len(call)
        with torch.no_grad():
            hidden = policy.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        predicts = torch.tensor(loss[1:], dtype=torch.bool)  # position t predicts id t+1
        feats.append(hidden[:-1][predicts])
        targets.append(torch.tensor(ids[1:])[predicts])
    x, y = torch.cat(feats), torch.cat(targets)
    head = policy.lm_head.weight
    opt = torch.optim.Adam([head], lr=2e-2)
    for _ in range(steps):
        loss = F.cross_entropy(x @ head.T, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.zero_grad(set_to_none=True)
    _CACHE[key] = policy.eval()
    return copy.deepcopy(policy)


def save_tool_tag_policy(tokenizer, tasks: list[Task], out: Path) -> Path:
    return save_policy(tool_tag_policy(tokenizer, tasks), out)
