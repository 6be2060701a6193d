"""Model-written steps: ask a language model to extend a task, parse and check its answer.

    t1 synth --rounds 2 --out DIR --llm-url http://127.0.0.1:8000 --llm-api openai
    t1 synth --rounds 2 --out DIR --llm-url http://127.0.0.1:30000 --llm-api sglang \
        --llm-tokenizer results/tiny/tokenizer          # t1 serve takes input_ids only

    synth = LLMSynthesizer(LLMClient(url, api="openai"))
    step, reasons, raw = synth.propose(parent_draft, rng)     # step is None when rejected

The model gets the parent task (instruction, the files it knows of, the last steps of its
solution) and must answer with ONE JSON object: `instruction`, `solution` (bash), `tests`
(pytest functions), optional `files` ({absolute path under /app: text}) and `category`.
`parse_candidate` rejects, with a reason each, what cannot become a step: no JSON object,
invalid JSON, missing or mistyped fields, tests that do not parse or define no `test_`
function, a solution bash cannot parse, files outside /app or over the parent's, assertions
on /app paths the instruction never names, oversize fields. A candidate that passes goes
through the same sandbox validation as library steps (the reference must pass, the state
before must fail the new assertions). Transport errors are reasons too: the run goes on.

Endpoints: "openai" POSTs /v1/chat/completions {model, messages, max_tokens, temperature,
seed} and reads choices[0].message.content; "sglang" POSTs /generate with `text` (or
`input_ids` from the chat template when a tokenizer is given, as t1 serve requires) and reads
`text` (or decodes `output_ids`).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import random
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from t1.httpjson import post_json
from t1.synth.draft import Draft, solution_text
from t1.synth.steps import CATEGORIES, WORKDIR, EnvFile, Step

MAX_FIELD = {"instruction": 4000, "solution": 12000, "tests": 12000}
REQUIRED = ("instruction", "solution", "tests")

SYSTEM = (
    "You write terminal tasks for training shell agents. You extend an existing task by ONE "
    "new step that builds on its results. Answer with a single JSON object and nothing else."
)

FORMAT = """Answer with one JSON object with these keys:
  "instruction": the new step's text for the agent; name every path and value the tests check,
  "solution": bash commands that perform the step (they run in /app after the earlier steps),
  "tests": Python pytest functions named test_... that check the step's results (absolute paths under /app),
  "files": optional object {"/app/...": "text"} of input files the environment provides,
  "category": one of %s.
Example:
{"instruction": "Count the lines of /app/data/x.csv and write the number to /app/reports/x_lines.txt.",
 "solution": "mkdir -p /app/reports\\nwc -l < /app/data/x.csv > /app/reports/x_lines.txt",
 "tests": "def test_lines():\\n    from pathlib import Path\\n    assert Path('/app/reports/x_lines.txt').read_text().strip() == '7'",
 "category": "data-processing"}"""


class LLMError(RuntimeError):
    """The endpoint could not be reached or answered with something that is not a completion."""


class LLMClient:
    """A minimal HTTP client for an OpenAI-compatible or SGLang-native completion endpoint."""

    def __init__(
        self,
        url: str,
        api: str = "openai",
        model: str = "default",
        tokenizer: str | Path | None = None,
        timeout: float = 300.0,
        max_tokens: int = 768,
        temperature: float = 0.7,
    ) -> None:
        if api not in ("openai", "sglang"):
            raise ValueError(f"api must be openai or sglang, got {api!r}")
        self.url, self.api, self.model = url.rstrip("/"), api, model
        self.timeout, self.max_tokens, self.temperature = timeout, max_tokens, temperature
        self.tokenizer = None
        if tokenizer is not None:
            from t1.agent.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(tokenizer)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        return post_json(self.url + path, body, timeout=self.timeout, error=LLMError)

    def complete(self, system: str, user: str, seed: int | None = None) -> str:
        """The model's text for one system + user prompt."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        if self.api == "openai":
            body = {
                "model": self.model,
                "messages": messages,
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
            }
            if seed is not None:
                body["seed"] = seed
            data = self._post("/v1/chat/completions", body)
            try:
                return str(data["choices"][0]["message"]["content"] or "")
            except (KeyError, IndexError, TypeError):
                raise LLMError(f"no choices[0].message.content in {str(data)[:200]}") from None
        sampling: dict[str, Any] = {
            "max_new_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if seed is not None:
            sampling["sampling_seed"] = seed
        if self.tokenizer is not None:
            ids = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True
            )
            if not isinstance(ids, list):  # newer transformers return a BatchEncoding
                ids = list(ids["input_ids"])
            stop = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            if isinstance(stop, int) and stop >= 0:
                sampling["stop_token_ids"] = [stop]
            data = self._post("/generate", {"input_ids": ids, "sampling_params": sampling})
        else:
            prompt = f"{system}\n\n{user}\n"
            data = self._post("/generate", {"text": prompt, "sampling_params": sampling})
        if not isinstance(data, dict):
            raise LLMError(f"/generate answered {str(data)[:200]}")
        text = data.get("text") or ""
        if not text and data.get("output_ids") and self.tokenizer is not None:
            text = self.tokenizer.decode(data["output_ids"], skip_special_tokens=True)
        return str(text)


def build_prompt(parent: Draft) -> str:
    """The user prompt: the task so far, the files it knows of, the end of its solution."""
    from t1.synth.draft import instruction_text

    known = sorted(
        {f.path for s in parent.steps for f in s.files} | {a.path for a in parent.artifacts}
    )
    sol = solution_text(parent)
    return "\n\n".join(
        [
            "The task so far (its instruction):\n" + instruction_text(parent)[-3000:],
            "Paths it provides or produces:\n" + ("\n".join(known[:40]) or "(none listed)"),
            "The end of its reference solution:\n" + sol[-1500:],
            FORMAT % ", ".join(CATEGORIES),
        ]
    )


def extract_json(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The first JSON object in `text` (code fences allowed), or (None, reason)."""
    s = re.sub(r"```(?:json)?", "", text)
    start = s.find("{")
    if start < 0:
        return None, "no JSON object in the response"
    depth, in_str, esc = 0, False, False
    for i in range(start, len(s)):
        ch = s[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                try:
                    obj = json.loads(s[start : i + 1])
                except json.JSONDecodeError as e:
                    return None, f"invalid JSON: {e.msg} (line {e.lineno} column {e.colno})"
                if not isinstance(obj, dict):
                    return None, "the JSON value is not an object"
                return obj, None
    return None, "invalid JSON: the object is not closed"


def _bash_syntax(script: str) -> str | None:
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        fh.write(script)
    try:
        r = subprocess.run(["bash", "-n", fh.name], capture_output=True, text=True, timeout=10)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    return None if r.returncode == 0 else r.stderr.strip().replace(fh.name, "solution")[:200]


def parse_candidate(raw: str, parent: Draft, index: int) -> tuple[Step | None, list[str]]:
    """A Step from a model's answer, or (None, reasons it cannot be one)."""
    obj, why = extract_json(raw)
    if obj is None:
        return None, [why or "no JSON object"]
    reasons: list[str] = []
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        reasons.append(f"missing field(s): {', '.join(missing)}")
    for k in REQUIRED:
        if k in obj and not (isinstance(obj[k], str) and obj[k].strip()):
            reasons.append(f"field {k!r} must be a non-empty string")
        elif k in obj and len(obj[k]) > MAX_FIELD[k]:
            reasons.append(f"field {k!r} is longer than {MAX_FIELD[k]} characters")
    files = obj.get("files") or {}
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        reasons.append("field 'files' must map paths to text")
        files = {}
    category = obj.get("category") if obj.get("category") in CATEGORIES else "scripting"
    if reasons:
        return None, reasons
    instruction, solution, tests = obj["instruction"].strip(), obj["solution"], obj["tests"]
    try:
        tree = ast.parse(tests)
    except SyntaxError as e:
        return None, [f"tests do not parse: {e.msg} (line {e.lineno})"]
    names = [
        n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]
    if not names:
        return None, ["tests define no top-level test_ function"]
    bash_error = _bash_syntax(solution)
    if bash_error:
        reasons.append(f"solution is not valid bash: {bash_error}")
    existing = {f.path for s in parent.steps for f in s.files} | {a.path for a in parent.artifacts}
    env_files = []
    for path, text in files.items():
        p = path if path.startswith("/") else f"{WORKDIR}/{path}"
        if not p.startswith(WORKDIR + "/") or ".." in p.split("/"):
            reasons.append(f"file {path!r} is outside {WORKDIR}")
        elif p in existing:
            reasons.append(f"file {p} already exists in the parent task")
        else:
            env_files.append(EnvFile(p, text))
    literals = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    paths = sorted(x for x in literals if x.startswith(WORKDIR + "/") and " " not in x)
    unnamed = [p for p in paths if p not in instruction]
    if unnamed:
        reasons.append(
            f"assertions reference paths the instruction does not name: {', '.join(unnamed[:5])}"
        )
    if reasons:
        return None, reasons
    offset = 1 if parent.base else 0
    prefix = f"test_s{len(parent.steps) + offset + 1:02d}_llm_"
    renamed = tests
    new_names = []
    for n in names:
        new = prefix + n.removeprefix("test_").lstrip("_")
        renamed = re.sub(rf"\bdef {re.escape(n)}\(", f"def {new}(", renamed)
        new_names.append(new)
    step = Step(
        kind="llm.step",
        category=category,
        instruction=instruction,
        solution=solution.strip() + "\n",
        tests=renamed.strip() + "\n",
        assertions=tuple(new_names),
        files=tuple(env_files),
        mentions=tuple(paths),
        params={"index": index},
    )
    return step, []


class LLMSynthesizer:
    """Proposes one model-written step per call; never raises for a bad answer."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client

    def propose(self, parent: Draft, rng: random.Random) -> tuple[Step | None, list[str], str]:
        """(step or None, reasons, raw text of the answer)."""
        seed = rng.randrange(2**31)
        try:
            raw = self.client.complete(SYSTEM, build_prompt(parent), seed=seed)
        except LLMError as e:
            return None, [f"endpoint error: {e}"], ""
        step, reasons = parse_candidate(raw, parent, seed)
        if step is not None:
            step = dataclasses.replace(step, params={**step.params, "model": self.client.model})
        return step, reasons, raw
