"""Chat glue for the bash agent: prompts as ids, turns appended as ids, tool calls parsed.

    pytest tests/test_chat.py

Two ways to build the prompt of the next turn (DESIGN §8):

* `next_prompt` (token level, what our agent loop uses): APPEND to the ids the engine consumed
  the exact ids it sampled, then the glue and the observation. Nothing the model sampled is
  ever re-tokenized, so the next prompt extends the stream exactly (TITO's strict relation).

      P0 = prompt_ids(tok, initial_messages(instruction))
      P1, appended = next_prompt(tok, P0, sampled_ids, observation)
      # P1 == P0 + sampled_ids + appended
      # appended == ["<|im_end|>" if the turn did not end with it] + "\n<|im_start|>user\n
      #             <tool_response>\n" + ids(observation) + "\n</tool_response><|im_end|>\n
      #             <|im_start|>assistant\n"

* `render_text` / `render_ids` (text level, what an OpenAI-style server does): re-render the
  whole message list with the chat template and tokenize the text. Used to produce text-level
  logs (t1.tito.turns_from_text_log) that exercise TITO's other relations.

Tool calls: `parse_tool_call(text)` reads the text of one sampled assistant turn and returns
the bash command, or an error message for a malformed call (the loop sends it back as the
observation and goes on), or neither for a final answer (no tool call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from t1.agent.tokenizer import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    TOOL_CALL,
    TOOL_CALL_END,
    TOOL_RESPONSE,
    TOOL_RESPONSE_END,
)

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command in a persistent bash shell; returns its output and exit code.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the shell command"}},
            "required": ["command"],
        },
    },
}
TOOLS = [BASH_TOOL]
SYSTEM_PROMPT = (
    "You are a terminal agent. Solve the task by running shell commands with the bash tool, "
    "one call per turn. When the task is done, answer without a tool call."
)

# Glue our loop appends around an observation: exactly what the chat template renders
# between an assistant turn's <|im_end|> and the next generation prompt.
GLUE_BEFORE_OBSERVATION = f"\n{IM_START}user\n{TOOL_RESPONSE}\n"
GLUE_AFTER_OBSERVATION = f"\n{TOOL_RESPONSE_END}{IM_END}\n{IM_START}assistant\n"


def initial_messages(instruction: str, system: str = SYSTEM_PROMPT) -> list[dict[str, Any]]:
    """The system + user messages a trajectory starts from."""
    return [{"role": "system", "content": system}, {"role": "user", "content": instruction}]


def render_text(
    tokenizer,
    messages: Sequence[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Sequence[dict[str, Any]] | None = TOOLS,
    **template_options: Any,
) -> str:
    """The chat template applied to `messages` (options: strip_reasoning, im_end_newline)."""
    return tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **template_options,
    )


def encode(tokenizer, text: str) -> list[int]:
    """Text -> ids as a server does it: special-token text becomes the special id."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_ids(
    tokenizer,
    messages: Sequence[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Sequence[dict[str, Any]] | None = TOOLS,
    **template_options: Any,
) -> list[int]:
    """Full re-render of `messages` to ids (text level: what an OpenAI-style server consumes)."""
    return encode(
        tokenizer,
        render_text(tokenizer, messages, add_generation_prompt, tools, **template_options),
    )


def prompt_ids(tokenizer, messages: Sequence[dict[str, Any]]) -> list[int]:
    """Ids of the first prompt (system with the bash tool, user, generation prompt)."""
    return render_ids(tokenizer, messages, add_generation_prompt=True)


@dataclass(frozen=True)
class Glue:
    """Pre-tokenized glue of one tokenizer (ids, never re-derived from sampled text)."""

    im_end: int
    endoftext: int
    before_observation: tuple[int, ...]
    after_observation: tuple[int, ...]

    @classmethod
    def of(cls, tokenizer) -> Glue:
        return cls(
            im_end=tokenizer.convert_tokens_to_ids(IM_END),
            endoftext=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
            before_observation=tuple(encode(tokenizer, GLUE_BEFORE_OBSERVATION)),
            after_observation=tuple(encode(tokenizer, GLUE_AFTER_OBSERVATION)),
        )


_GLUE_CACHE: dict[int, tuple[Any, Glue]] = {}


def glue_of(tokenizer) -> Glue:
    """`Glue.of(tokenizer)`, computed once per tokenizer object."""
    cached = _GLUE_CACHE.get(id(tokenizer))
    if cached is None or cached[0] is not tokenizer:
        cached = _GLUE_CACHE[id(tokenizer)] = (tokenizer, Glue.of(tokenizer))
    return cached[1]


def observation_ids(tokenizer, sampled_ids: Sequence[int], observation: str) -> list[int]:
    """The ids appended after a turn's sampled ids: [<|im_end|>] + glue + observation + glue.

    `<|im_end|>` is added as context only when the turn did not sample it (cut at max tokens).
    """
    g = glue_of(tokenizer)
    head = [] if sampled_ids and sampled_ids[-1] == g.im_end else [g.im_end]
    return (
        head
        + list(g.before_observation)
        + encode(tokenizer, observation)
        + list(g.after_observation)
    )


def next_prompt(
    tokenizer, prompt: Sequence[int], sampled_ids: Sequence[int], observation: str
) -> tuple[list[int], list[int]]:
    """(next prompt ids, appended ids): `prompt + sampled_ids + appended`, ids in, ids out."""
    appended = observation_ids(tokenizer, sampled_ids, observation)
    return list(prompt) + list(sampled_ids) + appended, appended


def turn_text(tokenizer, sampled_ids: Sequence[int]) -> str:
    """Decoded text of a sampled turn, without the stop token that ended it."""
    g = glue_of(tokenizer)
    ids = list(sampled_ids)
    while ids and ids[-1] in (g.im_end, g.endoftext):
        ids.pop()
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ------------------------------------------------------------------------------ tool calls


@dataclass(frozen=True)
class ToolCall:
    """What one sampled turn asks for: a command, a malformed call (error), or neither (final)."""

    command: str | None = None
    error: str | None = None

    @property
    def final(self) -> bool:
        return self.command is None and self.error is None


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_tool_call(text: str) -> ToolCall:
    """Parse `<tool_call>{"name": "bash", "arguments": {"command": ...}}</tool_call>`.

    Lenient about whitespace, a ```json fence around the object, `arguments` given as a JSON
    string, and text before or after the call; exact about everything else: one call, the
    `bash` tool, a string `command`. Returns ToolCall(command=...), ToolCall(error=...) for a
    malformed call, or ToolCall() when the turn has no tool call (a final answer).
    """
    text = text.replace(IM_END, "").replace(ENDOFTEXT, "")
    opens, closes = text.count(TOOL_CALL), text.count(TOOL_CALL_END)
    if opens == 0 and closes == 0:
        return ToolCall()
    if opens != closes:
        return ToolCall(
            error=f"malformed tool call: {opens} {TOOL_CALL} but {closes} {TOOL_CALL_END}"
        )
    if opens > 1:
        return ToolCall(error=f"one tool call per turn, got {opens}")
    start = text.index(TOOL_CALL) + len(TOOL_CALL)
    end = text.find(TOOL_CALL_END, start)
    if end < 0:
        return ToolCall(error=f"malformed tool call: {TOOL_CALL_END} before {TOOL_CALL}")
    body = text[start:end].strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1)
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(
            error=f"tool call is not valid JSON ({e.msg} at char {e.pos}): {body[:200]!r}"
        )
    if not isinstance(call, dict):
        return ToolCall(error=f"tool call must be a JSON object, got {type(call).__name__}")
    if call.get("name") != "bash":
        return ToolCall(error=f"unknown tool {call.get('name')!r}: the only tool is 'bash'")
    args = call.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ToolCall(error="tool call arguments are a string that is not a JSON object")
    if not isinstance(args, dict):
        return ToolCall(error='tool call needs "arguments": {"command": "..."}')
    command = args.get("command")
    if not isinstance(command, str):
        return ToolCall(error='tool call needs a string "command" in its arguments')
    if not command.strip():
        return ToolCall(error="tool call has an empty command")
    return ToolCall(command=command)


def tool_call_text(command: str) -> str:
    """How the template renders a bash call (also what a model should sample)."""
    args = json.dumps({"command": command}, ensure_ascii=False)
    return f'{TOOL_CALL}\n{{"name": "bash", "arguments": {args}}}\n{TOOL_CALL_END}'
