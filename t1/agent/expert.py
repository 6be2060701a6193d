"""Expert trajectories: reference solutions executed as multi-turn tool calls (SFT data).

    t1 rollout --config workflow/config/tiny.yaml --expert --out results/tiny/expert

The expert is an `Engine` (`ScriptedEngine`) whose "samples" are the ids of a tool call for
each next command of the task's reference solution, then a final answer. It runs through the
very same agent loop as the policy (t1.agent.loop), in a real sandbox, so observations are real
tool output and the verifier scores the result: a trajectory that does not resolve its task
is not expert data (the SFT stage filters on the reward).

Scripts are split into complete top-level commands: lines accumulate until `bash -n` accepts
the chunk (heredocs, loops, functions and continuation lines stay whole). Lines that would
change the persistent shell itself (`set -e`, a bare `exit`) are dropped: the agent's shell
must survive every command.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from t1.agent import chat
from t1.engine.base import GenerateRequest, GenerateResult
from t1.tasks.model import Task

FINAL_ANSWER = "The task is complete."
_SHELL_CONTROL = re.compile(
    r"^\s*(set\s+-[a-zA-Z]*[eu][a-zA-Z]*(\s+\S+)*|set\s+-o\s+\S+|exit(\s+\d+)?)\s*;?\s*$"
)


def _complete(chunk: str) -> bool:
    r = subprocess.run(["bash", "-n"], input=chunk, capture_output=True, text=True)
    # bash accepts an unterminated heredoc with only a warning: that chunk is not complete.
    return r.returncode == 0 and "here-document" not in r.stderr


def split_script(text: str) -> list[str]:
    """Top-level commands of a bash script, each syntactically complete on its own."""
    commands: list[str] = []
    buf: list[str] = []
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not buf and _SHELL_CONTROL.match(line):
            continue
        buf.append(line)
        chunk = "\n".join(buf)
        if line.rstrip().endswith("\\"):
            continue
        if _complete(chunk):
            commands.append(chunk)
            buf = []
    if buf:  # an incomplete tail: keep it whole so the shell reports the syntax error
        commands.append("\n".join(buf))
    return commands


def solution_commands(task: Task) -> list[str]:
    """The commands an expert types for `task`, starting in its workdir."""
    sol = task.solution
    if sol.kind == "commands":
        body = list(sol.commands)
    else:
        body = split_script(sol.path.read_text())
    return [f"cd {task.workdir}", *body]


class ScriptedEngine:
    """An Engine that "samples" a fixed list of tool calls, then a final answer.

    Logprobs are 0 (the expert is deterministic) and there is no routing capture: expert
    trajectories train the actor with SFT, not PPO, so R³ does not apply to them.
    """

    def __init__(self, tokenizer, commands: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.commands = list(commands)
        self.im_end = chat.glue_of(tokenizer).im_end
        self._turn = 0

    def _ids(self, text: str) -> list[int]:
        return chat.encode(self.tokenizer, text) + [self.im_end]

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        out = []
        for req in requests:
            if self._turn < len(self.commands):
                ids = self._ids(chat.tool_call_text(self.commands[self._turn]))
            else:
                ids = self._ids(FINAL_ANSWER)
            self._turn += 1
            out.append(
                GenerateResult(
                    request_id=req.request_id,
                    output_ids=ids,
                    output_logprobs=[0.0] * len(ids),
                    finish_reason="stop",
                    routing=None,
                    routing_start=req.routing_start,
                    prompt_tokens=len(req.input_ids),
                )
            )
        return out

    def abort(self, request_id: str) -> None:
        pass

    def close_session(self, session_id: str) -> None:
        pass

    def update_weights(self, path: str) -> None:
        raise NotImplementedError("the scripted expert has no weights")
