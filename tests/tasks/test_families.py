"""Task families (t1.tasks.families) and the pre-training corpus built from them (t1.train.corpus).

The corpus is only worth training on if it is exactly what the agent loop records for an expert
that solves the same task in a real sandbox: the integration test executes one instance of every
family through `t1.rollout.collect.expert_batch` (bubblewrap, the real verifier) and compares the TITO
stream with the generated transcript token for token.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

import pytest
from shared_fixtures import requires_bwrap

from t1.agent.tokenizer_train import bpe_tokenizer
from t1.config import Config, FamiliesConfig, PretrainConfig
from t1.tasks.families import (
    FAMILIES,
    TEST_HEAD,
    key_of,
    make_split,
    words_of,
    write_split,
)
from t1.tasks.family_corpus import draw_corpus
from t1.tasks.load import load_task
from t1.train.corpus import corpus_rows, heldout_keys, transcript


def test_heldout_instances_are_new_tuples_with_a_word_the_family_never_trained_on():
    split = make_split(seed=3, train=6, heldout=3)
    assert len(split["train"]) == 6 * len(FAMILIES) and len(split["heldout"]) == 3 * len(FAMILIES)
    train_keys = {key_of(i.family, i.params) for i in split["train"]}
    for inst in split["heldout"]:
        assert key_of(inst.family, inst.params) not in train_keys
        used = set().union(*(words_of(t.params) for t in split["train"] if t.family == inst.family))
        assert words_of(inst.params) - used, inst
    ids = [i.task_id for part in split.values() for i in part]
    assert len(ids) == len(set(ids))
    assert make_split(seed=3, train=6, heldout=3) == split  # the seed fixes the split
    assert make_split(seed=4, train=6, heldout=3) != split


def test_the_train_draws_do_not_depend_on_the_heldout_count():
    """Each split draws from its own stream: sizing the evaluation never changes what trains."""
    small, large = make_split(seed=3, train=4, heldout=2), make_split(seed=3, train=4, heldout=5)
    assert small["train"] == large["train"]
    assert len(small["heldout"]) == 2 * len(FAMILIES) and len(large["heldout"]) == 5 * len(FAMILIES)
    assert make_split(seed=3, train=4, heldout=2, unseen=3)["heldout"] == small["heldout"]


def test_made_up_training_instances_join_the_train_split_and_change_nothing_else(tmp_path):
    from t1.cli import main
    from t1.tasks.families import UNSEEN_WORDS, WORDS

    plain = make_split(seed=3, train=2, heldout=2, unseen=1)
    split = make_split(seed=3, train=2, heldout=2, unseen=1, made_up=3)
    made_up = split["train"][len(plain["train"]) :]
    assert split["train"][: len(plain["train"])] == plain["train"]
    assert (split["heldout"], split["heldout_unseen"]) == (
        plain["heldout"],
        plain["heldout_unseen"],
    )
    assert len(made_up) == 3 * len(FAMILIES) and {i.family for i in made_up} == set(FAMILIES)
    names = set().union(*(words_of(i.params) for i in made_up))
    assert not names & (set(WORDS) | set(UNSEEN_WORDS)) and len(names) > 3 * len(FAMILIES)
    ids = [i.task_id for part in split.values() for i in part]
    assert len(ids) == len(set(ids)) and made_up[0].index == 2 + 2 + 1
    # the config key reaches `t1 families` (and its flag overrides it)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("families: {train: 2, heldout: 2, heldout_unseen: 1, train_made_up: 3}\n")
    assert main(["families", "--config", str(cfg), "--out", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "families.json").read_text())
    assert len(doc["train"]) == (2 + 3) * len(FAMILIES)
    assert main(["families", "--config", str(cfg), "--out", str(tmp_path / "b"),
                 "--train-made-up", "0"]) == 0  # fmt: skip
    assert len(json.loads((tmp_path / "b" / "families.json").read_text())["train"]) == 2 * len(
        FAMILIES
    )


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown task families"):
        make_split(0, 1, 1, ["create-file", "nope"])


def test_corpus_never_holds_a_heldout_instance():
    cfg = Config(families=FamiliesConfig(enabled=True, train=4, heldout=4))
    keys = heldout_keys(cfg)
    assert len(keys) == 4 * len(FAMILIES)
    drawn = [key_of(i.family, i.params) for i in draw_corpus(0, 20000, keys)]
    assert not set(drawn) & keys
    # the guard can fail: without the exclusion a corpus this size draws held-out instances
    unguarded = {key_of(i.family, i.params) for i in draw_corpus(0, 20000, set())}
    assert unguarded & keys


def test_rendered_tasks_load_in_the_v2_layout(tmp_path):
    split = make_split(seed=0, train=1, heldout=1)
    summary = write_split(split, tmp_path, seed=0)
    assert summary["status"] == "ok" and len(summary["heldout"]) == len(FAMILIES)
    for part in ("train", "heldout"):
        for d in sorted((tmp_path / part).iterdir()):
            task = load_task(d)
            fam = json.loads((d / "family.json").read_text())["family"]
            assert task.category == FAMILIES[fam].category
            assert task.workdir == "/app"
            assert (d / "solution" / "solve.sh").read_text().splitlines()[1:] == [
                FAMILIES[fam].command(json.loads((d / "family.json").read_text())["params"])
            ]


@pytest.fixture(scope="module")
def tok():
    return bpe_tokenizer()


def test_corpus_rows_mask_only_the_assistant_tokens(tok):
    cfg = Config(
        families=FamiliesConfig(enabled=True, train=2, heldout=1),
        pretrain=PretrainConfig(examples=24),
    )
    rows = corpus_rows(cfg, tok)
    assert len(rows) == 24
    assert {r.meta["family"] for r in rows} == set(FAMILIES)
    for r in rows[:8]:
        text = tok.decode(
            [t for t, m in zip(r.ids, r.loss_mask, strict=True) if m], skip_special_tokens=False
        )
        assert text.count("<tool_call>") == 2 and text.endswith("The task is complete.<|im_end|>")
        assert "[exit code" not in text and "You are a terminal agent" not in text


@requires_bwrap
def test_transcript_equals_the_executed_expert_trajectory(tmp_path, tok):
    """One instance per family, executed by the expert in a real sandbox and scored by its
    verifier: the TITO stream and loss mask are the generated transcript's, token for token,
    and the batch keeps the order of its tasks while `rollout.workers` of them run at once."""
    from t1.config import load_config
    from t1.rollout.collect import expert_batch
    from t1.tito import assemble_trajectory

    split = make_split(seed=1, train=1, heldout=0)
    write_split(split, tmp_path / "fam", seed=1)
    cfg = load_config("workflow/config/tiny.yaml")
    cfg = dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, scale=3.0))
    tasks = [load_task(tmp_path / "fam" / "train" / i.task_id) for i in split["train"]]
    assert cfg.rollout.workers > 1  # the experts run side by side, each its own sandbox
    batch = expert_batch(tasks, tok, cfg, progress=False)
    for inst, traj in zip(split["train"], batch.admitted, strict=True):
        assert traj.metadata.get("resolved"), (inst.task_id, traj.reason)
        (seg,) = assemble_trajectory(traj, tok).segments
        row = transcript(tok, inst)
        assert tok.decode(list(seg.ids), skip_special_tokens=False) == tok.decode(
            list(row.ids), skip_special_tokens=False
        )
        assert list(seg.ids) == list(row.ids), inst.task_id
        assert [bool(m) for m in seg.loss_mask] == [bool(m) for m in row.loss_mask]


def test_packed_rows_drop_the_system_turn_and_keep_every_tool_call(tok):
    base = {"families": FamiliesConfig(enabled=True, train=2, heldout=1)}
    full = corpus_rows(Config(**base, pretrain=PretrainConfig(examples=12)), tok)
    packed = corpus_rows(
        Config(**base, pretrain=PretrainConfig(examples=12, pack=3, full_fraction=0.0)), tok
    )
    assert len(full) == 12 and len(packed) == 4
    for r in packed:
        text = tok.decode(list(r.ids), skip_special_tokens=False)
        assert "You are a terminal agent" not in text and text.count("<|im_start|>user\n") >= 3

    # the same transcripts, so the same sampled tokens: 2 tool calls + the answer each
    def sampled(rows):
        return sum(sum(bool(m) for m in r.loss_mask) for r in rows)

    assert sampled(packed) == sampled(full)
    mixed = corpus_rows(
        Config(**base, pretrain=PretrainConfig(examples=60, pack=3, full_fraction=0.5)), tok
    )
    n_full = sum("You are a terminal agent" in tok.decode(list(r.ids)) for r in mixed)
    assert 0 < n_full < len(mixed)
    with pytest.raises(ValueError, match="pack"):
        corpus_rows(Config(**base, pretrain=PretrainConfig(examples=4, pack=0)), tok)


def test_rare_families_hold_their_share_of_the_corpus(tok):
    """pretrain.rare_families / rare_share: a rare family holds about `share` of the transcripts
    another family holds; none rare draws exactly the corpus it always drew."""
    text = ["count-lines", "sort-lines", "grep-lines"]
    keys = heldout_keys(Config(families=FamiliesConfig(enabled=True, train=4, heldout=4)))
    plain = [(i.family, i.params) for i in draw_corpus(0, 400, keys, 24, 0.5)]
    assert plain == [(i.family, i.params) for i in draw_corpus(0, 400, keys, 24, 0.5, {})]
    drawn = list(draw_corpus(0, 8000, keys, 24, 0.5, dict.fromkeys(text, 0.2)))
    counts = {name: sum(i.family == name for i in drawn) for name in FAMILIES}
    assert len(drawn) == 8000 and not {key_of(i.family, i.params) for i in drawn} & keys
    for name in text:
        assert 0.15 < counts[name] / counts["copy-file"] < 0.25, counts
    assert len({counts[name] for name in FAMILIES if name not in text}) <= 2  # round-robin
    # the config keys reach the corpus, and a bad one is refused naming it
    base = {"families": FamiliesConfig(enabled=True, train=2, heldout=1)}
    pre = {"examples": 200, "pack": 1}
    rows = corpus_rows(
        Config(**base, pretrain=PretrainConfig(**pre, rare_families=text, rare_share=0.1)), tok
    )
    fams = [r.meta["family"] for r in rows]
    assert len(rows) == 200 and sum(f in text for f in fams) < 0.1 * 200
    with pytest.raises(ValueError, match="no such family"):
        corpus_rows(
            Config(
                **base, pretrain=PretrainConfig(**pre, rare_families=["ls-dir"], rare_share=0.5)
            ),
            tok,
        )
    with pytest.raises(ValueError, match="rare_share"):
        corpus_rows(
            Config(**base, pretrain=PretrainConfig(**pre, rare_families=text, rare_share=0.0)), tok
        )


def test_words_limits_the_names_drawn():
    split = make_split(seed=0, train=3, heldout=1, words=12)
    from t1.tasks.families import WORDS

    for inst in split["train"] + split["heldout"]:
        assert words_of(inst.params) <= set(WORDS[:12])
    assert any(words_of(i.params) - set(WORDS[:12]) for i in make_split(0, 3, 1)["train"])
    with pytest.raises(ValueError, match="families.words"):
        make_split(seed=0, train=1, heldout=1, words=2)


def _passed(inst, app) -> int:
    """How many of the instance's verifier cases pass on the directory `app` (run in-process:
    the cases only read files)."""
    src = TEST_HEAD.format(task_id=inst.task_id, family=inst.family).replace(
        'Path("/app")', f"Path({str(app)!r})"
    )
    ns: dict = {}
    exec(src + "\n\n" + inst.fam.tests(inst.params), ns)  # noqa: S102 - our own rendered tests
    n = 0
    for name, fn in ns.items():
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                n += 1
            except (AssertionError, OSError):
                pass
    return n


def _setup(inst, app) -> None:
    app.mkdir()
    for name, content in inst.fam.files(inst.params).items():
        (app / name).write_text(content)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_redirection_alone_earns_nothing_a_do_nothing_agent_does_not(tmp_path, family):
    """`cmd > B.txt` creates B.txt (empty when cmd prints nothing, or hangs reading the
    terminal) before cmd runs: every file the instruction names that is not there yet, created
    empty, must pass no more cases than doing nothing, except where an empty file is itself
    half of what was asked (create-file). The expert's command passes every case."""
    inst = next(i for i in make_split(seed=5, train=1, heldout=0)["train"] if i.family == family)
    total = inst.fam.tests(inst.params).count("def test_")
    noop, hack, expert = (tmp_path / x for x in ("noop", "hack", "expert"))
    for d in (noop, hack, expert):
        _setup(inst, d)
    named = set(re.findall(r"[\w.-]+\.(?:txt|log)", inst.instruction()))
    for name in named:
        if not (hack / name).exists():
            (hack / name).write_text("")
    subprocess.run(["bash", "-c", inst.commands()[0]], cwd=expert, check=True, timeout=30)
    assert _passed(inst, expert) == total
    # two cases in every family: a resolved instance earns the same dense reward in each (a
    # one-case family's right answer earned half a two-case one's, and PPO unlearnt it)
    assert total == 2, (family, total)
    gain = _passed(inst, hack) - _passed(inst, noop)
    assert gain == (1 if family == "create-file" else 0), (family, gain, total)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_near_miss_runs_silently_and_fails_what_the_command_passes(tmp_path, family):
    """pretrain.near_miss_share's commands: one edit from the family's command, silent and exit
    0 in a real shell (the corpus shows every observation empty, exit 0), and short of the
    tests, which the family's command passes on the same instance."""
    insts = [
        i for i in make_split(seed=3, train=6, heldout=0, words=24)["train"] if i.family == family
    ]
    for inst in insts:
        total = inst.fam.tests(inst.params).count("def test_")
        miss, expert = tmp_path / f"{inst.task_id}-miss", tmp_path / f"{inst.task_id}-expert"
        for d, near in ((miss, True), (expert, False)):
            _setup(inst, d)
            out = subprocess.run(
                ["bash", "-c", inst.commands(near)[0]], cwd=d, capture_output=True, timeout=30
            )
            assert (out.returncode, out.stdout, out.stderr) == (0, b"", b""), (inst, near, out)
        assert inst.commands(True) != inst.commands(False)
        assert _passed(inst, expert) == total
        assert _passed(inst, miss) < total, (inst.task_id, inst.commands(True))


def test_near_misses_take_their_share_of_every_family_and_share_0_draws_nothing(tok):
    """pretrain.near_miss_share: about that share of each family's transcripts types the near
    miss (the tool call in the row is the near miss's); share 0 is the corpus without the key."""
    base = {"families": FamiliesConfig(enabled=True, train=2, heldout=1)}
    pre = {"examples": 800, "pack": 1}
    plain = corpus_rows(Config(**base, pretrain=PretrainConfig(**pre)), tok)
    zero = corpus_rows(Config(**base, pretrain=PretrainConfig(**pre, near_miss_share=0.0)), tok)
    assert [list(r.ids) for r in plain] == [list(r.ids) for r in zero]
    rows = corpus_rows(Config(**base, pretrain=PretrainConfig(**pre, near_miss_share=0.4)), tok)
    assert len(rows) == 800
    for name in FAMILIES:
        fam = [r for r in rows if r.meta["family"] == name]
        share = sum(bool(r.meta.get("near_miss")) for r in fam) / len(fam)
        assert 0.25 < share < 0.55, (name, share)  # 100 per family: sd 0.05
    # the same instances in the same order: only the command of the near-miss rows differs
    assert [r.meta["task_id"] for r in rows] == [r.meta["task_id"] for r in plain]
    for r, p in zip(rows, plain, strict=True):
        assert (list(r.ids) == list(p.ids)) == (not r.meta.get("near_miss"))
    miss = next(
        r for r in rows if r.meta.get("family") == "count-lines" and r.meta.get("near_miss")
    )
    text = tok.decode(list(miss.ids))
    assert '"wc -l ' in text and "wc -l <" not in text
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="near_miss_share"):
            corpus_rows(Config(**base, pretrain=PretrainConfig(**pre, near_miss_share=bad)), tok)
