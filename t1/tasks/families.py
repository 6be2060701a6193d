"""Task families small enough for the tiny policy to learn, with held-out instances.

    t1 families --config workflow/config/tiny.yaml --out results/tiny/tasks/families

Each family is a parameterized one-command shell task ("In /app, copy tulip.txt to
cedar.txt.") with 2 pytest assertions (dense reward), rendered in the v2 (Harbor) layout
that `t1 synth` writes: instruction.md, task.toml, environment/Dockerfile (+ files/),
solution/solve.sh, tests/test.sh + tests/test_outputs.py. Their verifiers run through the same
oracle, no-op, audit-free pool and reward path as every other task.

Every parameter appears in the instruction exactly as the command spells it (" tulip.txt",
never "/app/tulip.txt"): with a byte-level BPE the word after "/" and the word after a space
are different tokens, and a tiny policy learns to copy a token long before it learns to map
one token to another (measured: with "/app/NAME" instructions, 400 pre-training steps left
every held-out command wrong, all other tokens right).

`make_split(seed, train, heldout, unseen=N)` draws the instances of every family: `train` per
family go to OUT/train (the PPO pool and the SFT experts), `heldout` per family to OUT/heldout
(only evaluated). No parameter tuple appears in both, and every held-out instance uses at least one
word that no training instance of its family uses, so a held-out task is one the policy never
saw in SFT or PPO (the pre-training corpus, t1.train.corpus, never contains a held-out
instance either: it excludes them by their parameters).

A third split, `heldout_unseen` per family (OUT/heldout_unseen), draws every word (names, grep
word, file contents) from UNSEEN_WORDS, a pool disjoint from WORDS and from every text the
training stages produce or consume: the tokenizer corpus (t1.agent.tokenizer_train), the
pre-training corpus (t1.train.corpus), the SFT experts and the PPO pool (the train pool: these
families' train split, the seed tasks, t1 synth's tasks). The trained tokenizer splits each of
these words into 2 or more tokens. A held-out instance recombines words the policy saw in
every stage; an unseen one measures whether it copies a name from the prompt at all
(tests/test_families_unseen.py scans the stages' texts for the pool). Per family: N =
`families.heldout_unseen` (8; HELDOUT_UNSEEN without a config).
`synthetic_name` (t1.tasks.family_words, with the word pools) makes up names for the
pre-training corpus (t1.tasks.family_corpus.draw_corpus's `synthetic`) and for `families.train_made_up` more
training instances per family (make_split's `made_up`).

Families, by category (difficulty in brackets; the no-op score is what an agent that does
nothing passes):

  files   create-file [easy], make-dirs [easy], copy-file [easy, no-op 1/2],
          rename-file [easy], delete-file [easy, no-op 1/2]
  text    count-lines [medium], sort-lines [medium], grep-lines [medium]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic
from t1.tasks.family_words import UNSEEN_WORDS, Words, synthetic_name, word_pool
from t1.tasks.family_words import WORDS as WORDS  # re-exported
from t1.tasks.runner import TEST_FILE, TEST_SH

SCHEMA_VERSION = 1
WORKDIR = "/app"
# unseen instances per family without a config (`families.heldout_unseen`)
HELDOUT_UNSEEN = 8

TEST_HEAD = '''"""Verifier of {task_id} (t1 families: {family}): one pytest case per assertion."""
from pathlib import Path

APP = Path("/app")


def _read(name):
    return (APP / name).read_text()
'''


@dataclass(frozen=True)
class Family:
    """One task family: how its parameters are drawn and what each instance contains."""

    name: str
    category: str
    difficulty: str
    draw: Callable[[random.Random, tuple[str, ...]], dict[str, Any]]  # (rng, word pool)
    instruction: Callable[[dict[str, Any]], str]
    command: Callable[[dict[str, Any]], str]
    files: Callable[[dict[str, Any]], dict[str, str]]  # /app-relative name -> content
    tests: Callable[[dict[str, Any]], str]  # pytest functions (after TEST_HEAD)
    # a command one edit from `command` that runs silently (exit 0) and fails at least one of
    # `tests`: what the pre-training corpus shows for `pretrain.near_miss_share` of a family
    near_miss: Callable[[dict[str, Any]], str]


def _lines(r: random.Random, words: Words, n: int) -> list[str]:
    return [" ".join(r.sample(words, 2)) for _ in range(n)]


def _create_file(r, words):
    a, b = r.sample(words, 2)
    return {"name": a, "word": b}


def _make_dirs(r, words):
    a, b = r.sample(words, 2)
    return {"parent": a, "child": b}


def _two_files(r, words):
    a, b, c = r.sample(words, 3)
    return {"src": a, "dst": b, "word": c}


def _delete(r, words):
    a, b = r.sample(words, 2)
    return {"victim": a, "keep": b}


def _text(r, words):
    a, b = r.sample(words, 2)
    lines = _lines(r, words, r.randint(3, 7))
    return {"src": a, "dst": b, "lines": lines}


def _grep(r, words):
    a, b, w = r.sample(words, 3)
    lines = _lines(r, words, r.randint(4, 7))
    hits = sorted(r.sample(range(len(lines)), r.randint(1, 2)))
    for i in hits:
        lines[i] = f"{lines[i].split()[0]} {w}"
    return {"src": a, "dst": b, "word": w, "lines": lines}


def _body(lines: list[str]) -> str:
    return "".join(f"{x}\n" for x in lines)


# Every assertion is evidence of progress a redirection alone cannot fake: `anything > B.txt`
# creates B.txt before the command runs, so "B.txt exists" paid a third of a task's dense reward
# to `grep W > B.txt` (a grep with no file, which hangs), and PPO learnt it on grep-lines and
# carried it over to count-lines (14 -> 0 of 16 held-out, 2026-12-03). An output's content test
# implies it exists; only create-file keeps "the file exists", which is half of what it asks.
#
# Every family has two assertions, so a resolved instance earns the same dense reward in every
# family (2/3 at the tiny config's scale 3). With count-lines and grep-lines at one assertion,
# a resolved text task earned 1/3, below the PPO rollouts' mean reward (0.41: seed tasks capped
# at the scale earn 1.0 unresolved), and a critic that does not yet tell tasks apart gave every
# right answer of theirs a negative advantage: PPO unlearnt them (grep-lines 14 -> 6,
# count-lines 15 -> 3 of 16 held-out, LOG.md 2026-12-03, ninth session).
#
# Every expert command names the instruction's names in the order the instruction does. The
# tiny MoE copies a name in order (an induction head: after the last copied token, what
# followed it) but did not learn to reorder them: with grep-lines' expert command `grep WORD
# SRC.txt > DST.txt` for "the lines of SRC.txt that contain WORD to DST.txt", greedy decoding
# after pre-training typed 0 of 16 held-out commands right (the source name was another word),
# at every stage of every run. `cat SRC.txt | grep WORD > DST.txt` asks the same of the
# verifier and only an in-order copy of the model: 16 of 16 (LOG.md, 2026-12-03, ninth
# session). The policy may still answer any way that passes the tests.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "create-file", "files", "easy", _create_file,
            lambda p: f"In /app, create the file {p['name']}.txt containing the word {p['word']}.",
            lambda p: f"echo {p['word']} > {p['name']}.txt",
            lambda p: {},
            lambda p: (
                f"def test_file_exists():\n    assert (APP / '{p['name']}.txt').is_file()\n\n\n"
                f"def test_content():\n    assert _read('{p['name']}.txt').strip() == '{p['word']}'\n"
            ),
            lambda p: f"touch {p['name']}.txt",  # exists, empty: 1 of 2
        ),
        Family(
            "make-dirs", "files", "easy", _make_dirs,
            lambda p: f"In /app, create the directory {p['parent']}/{p['child']}.",
            lambda p: f"mkdir -p {p['parent']}/{p['child']}",
            lambda p: {},
            lambda p: (
                f"def test_parent():\n    assert (APP / '{p['parent']}').is_dir()\n\n\n"
                f"def test_child():\n    assert (APP / '{p['parent']}' / '{p['child']}').is_dir()\n"
            ),
            lambda p: f"mkdir {p['parent']}",  # the parent only: 1 of 2
        ),
        Family(
            "copy-file", "files", "easy", _two_files,
            lambda p: f"In /app, copy {p['src']}.txt to {p['dst']}.txt.",
            lambda p: f"cp {p['src']}.txt {p['dst']}.txt",
            lambda p: {f"{p['src']}.txt": f"{p['word']}\n"},
            lambda p: (
                f"def test_copy_content():\n    assert _read('{p['dst']}.txt') == '{p['word']}\\n'\n\n\n"
                f"def test_original_kept():\n    assert _read('{p['src']}.txt') == '{p['word']}\\n'\n"
            ),
            lambda p: f"mv {p['src']}.txt {p['dst']}.txt",  # the original gone: 1 of 2
        ),
        Family(
            "rename-file", "files", "easy", _two_files,
            lambda p: f"In /app, rename {p['src']}.txt to {p['dst']}.txt.",
            lambda p: f"mv {p['src']}.txt {p['dst']}.txt",
            lambda p: {f"{p['src']}.txt": f"{p['word']}\n"},
            lambda p: (
                f"def test_old_name_gone():\n    assert not (APP / '{p['src']}.txt').exists()\n\n\n"
                f"def test_content_kept():\n    assert _read('{p['dst']}.txt') == '{p['word']}\\n'\n"
            ),
            lambda p: f"cp {p['src']}.txt {p['dst']}.txt",  # the old name kept: 1 of 2
        ),
        Family(
            "delete-file", "files", "easy", _delete,
            lambda p: f"In /app, delete {p['victim']}.log but keep {p['keep']}.txt.",
            lambda p: f"rm {p['victim']}.log",
            lambda p: {f"{p['victim']}.log": "old\n", f"{p['keep']}.txt": "keep\n"},
            lambda p: (
                f"def test_deleted():\n    assert not (APP / '{p['victim']}.log').exists()\n\n\n"
                f"def test_kept():\n    assert _read('{p['keep']}.txt') == 'keep\\n'\n"
            ),
            lambda p: f"rm {p['victim']}.log {p['keep']}.txt",  # the kept one too: 1 of 2
        ),
        Family(
            "count-lines", "text", "medium", _text,
            lambda p: f"In /app, write the number of lines of {p['src']}.txt to {p['dst']}.txt.",
            lambda p: f"wc -l < {p['src']}.txt > {p['dst']}.txt",
            lambda p: {f"{p['src']}.txt": _body(p["lines"])},
            lambda p: (
                f"def test_one_number():\n    assert _read('{p['dst']}.txt').strip().isdigit()\n\n\n"
                f"def test_count():\n    assert _read('{p['dst']}.txt').strip() == '{len(p['lines'])}'\n"
            ),
            lambda p: f"wc -l {p['src']}.txt > {p['dst']}.txt",  # 'N SRC.txt': 0 of 2
        ),
        Family(
            "sort-lines", "text", "medium", _text,
            lambda p: f"In /app, sort the lines of {p['src']}.txt into {p['dst']}.txt.",
            lambda p: f"sort {p['src']}.txt > {p['dst']}.txt",
            lambda p: {f"{p['src']}.txt": _body(p["lines"])},
            lambda p: (
                f"def test_same_lines():\n    assert sorted(_read('{p['dst']}.txt').split('\\n')) == "
                f"sorted({_body(p['lines']).split(chr(10))!r})\n\n\n"
                f"def test_sorted():\n    assert _read('{p['dst']}.txt') == {_body(sorted(p['lines']))!r}\n"
            ),
            lambda p: f"sort -r {p['src']}.txt > {p['dst']}.txt",  # reversed: 1 of 2
        ),
        Family(
            "grep-lines", "text", "medium", _grep,
            lambda p: (
                f"In /app, write the lines of {p['src']}.txt that contain {p['word']} "
                f"to {p['dst']}.txt."
            ),
            lambda p: f"cat {p['src']}.txt | grep {p['word']} > {p['dst']}.txt",
            lambda p: {f"{p['src']}.txt": _body(p["lines"])},
            lambda p: (
                f"def test_only_matching():\n    out = _read('{p['dst']}.txt').splitlines()\n"
                f"    assert out and all({p['word']!r} in x for x in out)\n\n\n"
                f"def test_lines():\n    assert _read('{p['dst']}.txt') == "
                f"{_body([x for x in p['lines'] if p['word'] in x])!r}\n"
            ),
            lambda p: f"cat {p['src']}.txt | grep -v {p['word']} > {p['dst']}.txt",  # 0 of 2
        ),
    )
}  # fmt: skip


def words_of(params: dict[str, Any]) -> set[str]:
    """The drawn words of an instance (names and the grep word; not file contents)."""
    return {v for k, v in params.items() if isinstance(v, str)}


def key_of(family: str, params: dict[str, Any]) -> str:
    """An instance's identity: its family and its drawn words."""
    return json.dumps([family, sorted((k, v) for k, v in params.items() if isinstance(v, str))])


@dataclass(frozen=True)
class Instance:
    family: str
    params: dict[str, Any]
    index: int

    @property
    def task_id(self) -> str:
        return f"{self.family}-{self.index:03d}"

    @property
    def fam(self) -> Family:
        return FAMILIES[self.family]

    def instruction(self) -> str:
        return self.fam.instruction(self.params)

    def instruction_md(self) -> str:
        """instruction.md's text, which is what the agent's prompt holds (newline included)."""
        return self.instruction() + "\n"

    def commands(self, near_miss: bool = False) -> list[str]:
        """What the expert types (after `cd /app`); `near_miss`: the family's near miss instead,
        which fails the instance's tests (the corpus's `pretrain.near_miss_share`)."""
        return [(self.fam.near_miss if near_miss else self.fam.command)(self.params)]


def make_split(
    seed: int,
    train: int,
    heldout: int,
    families: list[str] | None = None,
    words: int = 0,
    unseen: int = 0,
    made_up: int = 0,
) -> dict[str, list[Instance]]:
    """`train` and `heldout` instances per family; held-out ones share no parameter tuple with
    the training ones and each holds a word its family's training instances never use.
    `words`: draw from the first N words of WORDS (0 = all). `unseen` per family go to
    `heldout_unseen`, every word drawn from UNSEEN_WORDS. Each split draws from its own random
    stream: the train draws are the same whatever `heldout` and `unseen` are, and the held-out
    draws whatever `unseen` is. `made_up` more training instances per
    family name everything with fresh `synthetic_name`s (their own stream, indexed after the
    unseen ones): the SFT experts and PPO then reward copying names of no fixed vocabulary."""
    pool = word_pool(words)
    names = families or list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown task families {unknown} (known: {sorted(FAMILIES)})")
    r = random.Random(f"t1-families-{seed}")
    out: dict[str, list[Instance]] = {"train": [], "heldout": [], "heldout_unseen": []}
    seen_of: dict[str, set[str]] = {}
    used_of: dict[str, set[str]] = {}
    for name in names:
        fam = FAMILIES[name]
        seen = seen_of[name] = set()
        used = used_of[name] = set()
        for i in range(train):
            for _ in range(1000):
                p = fam.draw(r, pool)
                if key_of(name, p) not in seen:
                    break
            seen.add(key_of(name, p))
            used |= words_of(p)
            out["train"].append(Instance(name, p, i))
    r = random.Random(f"t1-families-heldout-{seed}")  # the train draws: whatever `heldout` is
    for name in names:
        fam, seen, used = FAMILIES[name], seen_of[name], used_of[name]
        for j in range(heldout):
            for _ in range(10000):
                p = fam.draw(r, pool)
                if key_of(name, p) not in seen and words_of(p) - used:
                    break
            else:
                raise ValueError(f"{name}: cannot draw {heldout} held-out instances")
            seen.add(key_of(name, p))
            out["heldout"].append(Instance(name, p, train + j))
    out["heldout_unseen"] = _unseen(seed, unseen, names, train + heldout)
    out["train"] += _made_up(seed, made_up, names, train + heldout + unseen)
    return out


def _made_up(seed: int, n: int, names: list[str], first: int) -> list[Instance]:
    """`n` instances per family, each drawn from 8 fresh made-up names, indexed from `first`."""
    r = random.Random(f"t1-families-made-up-{seed}")
    out = []
    for name in names:
        for j in range(n):
            words = tuple(sorted({synthetic_name(r) for _ in range(8)}))
            out.append(Instance(name, FAMILIES[name].draw(r, words), first + j))
    return out


def _unseen(seed: int, n: int, names: list[str], first: int) -> list[Instance]:
    """`n` distinct instances per family drawn from UNSEEN_WORDS, indexed from `first`."""
    r = random.Random(f"t1-families-unseen-{seed}")
    out = []
    for name in names:
        seen: set[str] = set()
        for j in range(n):
            for _ in range(10000):
                p = FAMILIES[name].draw(r, UNSEEN_WORDS)
                if key_of(name, p) not in seen:
                    break
            else:
                raise ValueError(f"{name}: cannot draw {n} unseen instances")
            seen.add(key_of(name, p))
            out.append(Instance(name, p, first + j))
    return out


def render(inst: Instance, out: Path) -> Path:
    """Write one instance as a v2 task directory (written aside, then renamed)."""
    fam = inst.fam
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "environment").mkdir(parents=True)
    files = fam.files(inst.params)
    docker = ["FROM python:3.11-slim-bookworm", f"WORKDIR {WORKDIR}"]
    for name, content in sorted(files.items()):
        (tmp / "environment" / "files").mkdir(exist_ok=True)
        (tmp / "environment" / "files" / name).write_text(content)
        docker.append(f"COPY files/{name} {WORKDIR}/{name}")
    (tmp / "environment" / "Dockerfile").write_text("\n".join(docker) + "\n")
    (tmp / "solution").mkdir()
    solve = tmp / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\n" + "\n".join(inst.commands()) + "\n")
    solve.chmod(0o755)
    (tmp / "tests").mkdir()
    (tmp / "tests" / "test.sh").write_text(TEST_SH)
    (tmp / "tests" / "test.sh").chmod(0o755)
    tests = (
        TEST_HEAD.format(task_id=inst.task_id, family=inst.family) + "\n\n" + fam.tests(inst.params)
    )
    (tmp / "tests" / TEST_FILE).write_text(tests)
    (tmp / "instruction.md").write_text(inst.instruction_md())
    (tmp / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\n'
        f'category = "{fam.category}"\ndifficulty = "{fam.difficulty}"\n'
        f'tags = ["t1-families", "{inst.family}"]\nauthor_name = "t1 families"\n\n'
        "[verifier]\ntimeout_sec = 60\n\n[agent]\ntimeout_sec = 300\n\n"
        "[environment]\ncpus = 1\nmemory_mb = 1024\nallow_internet = false\n"
    )
    write_json_atomic(
        tmp / "family.json",
        {"schema_version": SCHEMA_VERSION, "family": inst.family, "params": inst.params},
    )
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def write_split(split: dict[str, list[Instance]], out: Path, seed: int) -> dict[str, Any]:
    out = Path(out)
    for part, insts in split.items():
        (out / part).mkdir(parents=True, exist_ok=True)
        for inst in insts:
            render(inst, out / part / inst.task_id)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "seed": seed,
        "families": sorted({i.family for insts in split.values() for i in insts}),
        **{part: [i.task_id for i in insts] for part, insts in split.items()},
    }
    write_json_atomic(out / "families.json", summary)
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="campaign config (families.* keys)")
    parser.add_argument(
        "--out",
        required=True,
        help="writes OUT/train, OUT/heldout, OUT/heldout_unseen, OUT/families.json",
    )
    parser.add_argument("--train", type=int, help="training instances per family")
    parser.add_argument("--heldout", type=int, help="held-out instances per family")
    parser.add_argument(
        "--heldout-unseen", type=int, help="instances per family named from UNSEEN_WORDS"
    )
    parser.add_argument(
        "--train-made-up", type=int, help="more training instances per family, made-up names"
    )
    parser.add_argument("--seed", type=int)


def main(args: argparse.Namespace) -> int:
    from t1.config import load_config

    cfg = load_config(args.config) if args.config else None
    fc = cfg.families if cfg is not None else None
    seed = args.seed if args.seed is not None else (cfg.run.seed if cfg else 0)
    train = args.train if args.train is not None else (fc.train if fc else 6)
    heldout = args.heldout if args.heldout is not None else (fc.heldout if fc else 3)
    unseen = args.heldout_unseen
    if unseen is None:  # families.heldout_unseen
        unseen = fc.heldout_unseen if fc else HELDOUT_UNSEEN
    names = list(fc.names) if fc and fc.names else None
    made_up = args.train_made_up
    if made_up is None:  # families.train_made_up
        made_up = fc.train_made_up if fc else 0
    split = make_split(seed, train, heldout, names, fc.words if fc else 0, unseen, made_up)
    s = write_split(split, Path(args.out), seed)
    print(f"t1 families: {len(s['train'])} training, {len(s['heldout'])} held-out and "
          f"{len(s['heldout_unseen'])} unseen-name tasks of {len(s['families'])} families "
          f"in {args.out}")  # fmt: skip
    return 0
