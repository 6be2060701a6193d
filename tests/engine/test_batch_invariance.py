"""Batch-invariant decoding of the local engine's lean path (t1/engine/lean.py).

A request's sampled ids, logprobs and routing must be bit-identical whether it is decoded alone
or beside any other requests: different companions, companions that are prefix-cache hits,
companions that finish earlier, more rows than one tile. The negative control puts the
batch-dependent matmul back (`batch_invariant=False`: M = live rows) and must break it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t1.config import ModelConfig
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.lean import TILE, LeanQwen3Moe, RowCache
from t1.engine.local import LocalEngine
from t1.model.policy import build_policy

VOCAB = 512
TARGET = SamplingParams(temperature=1.0, max_new_tokens=20, seed=7)


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(2)
    return build_policy(ModelConfig(), VOCAB, seed=0)


def _engine(policy, dtype="float32", **kw) -> LocalEngine:
    model = build_policy(ModelConfig(), VOCAB, seed=0)
    model.load_state_dict(policy.state_dict())
    return LocalEngine(model, dtype=dtype, **{"max_batch": 16, **kw})


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _companions(n: int, seed: int, new: int = 30) -> list[GenerateRequest]:
    return [
        GenerateRequest(
            _ids(5 + 7 * i, seed + i), SamplingParams(max_new_tokens=new, seed=seed + i)
        )
        for i in range(n)
    ]


def _target_runs(eng: LocalEngine) -> list[tuple[str, object]]:
    """The target request decoded alone and in four batch compositions (fresh sessions)."""
    prompt = _ids(13, 100)
    runs = []

    def target(session=None):
        return GenerateRequest(list(prompt), TARGET, session_id=session)

    runs.append(("alone", eng.generate([target()])[0]))
    runs.append(
        ("two companions", eng.generate([*_companions(1, 1), target(), *_companions(1, 2)])[1])
    )
    early = _companions(3, 10, new=2)  # they leave the batch after 2 tokens
    runs.append(("companions finishing early", eng.generate([target(), *early])[0]))
    # companions that are prefix-cache hits: each continues a session generated before
    firsts = _companions(3, 20, new=6)
    for i, req in enumerate(firsts):
        req.session_id = f"hit-{i}"
    done = eng.generate(firsts)
    hits = [
        GenerateRequest(
            req.input_ids + res.output_ids + _ids(4, 30 + i),
            SamplingParams(max_new_tokens=25, seed=40 + i),
            session_id=req.session_id,
        )
        for i, (req, res) in enumerate(zip(firsts, done, strict=True))
    ]
    out = eng.generate([*hits[:2], target(), hits[2]])
    assert all(r.cached_tokens > 0 for r in (out[0], out[1], out[3]))
    runs.append(("beside prefix-cache hits", out[2]))
    many = _companions(TILE + 2, 50, new=12)  # more rows than one tile: the target is in the 2nd
    runs.append(("second tile", eng.generate([*many, target()])[-1]))
    return runs


def _differences(runs) -> list[str]:
    (_, ref), bad = runs[0], []
    for name, res in runs[1:]:
        res.check(4, 2)
        if res.output_ids != ref.output_ids:
            bad.append(f"{name}: ids")
        elif res.output_logprobs != ref.output_logprobs:
            bad.append(f"{name}: logprobs")
        elif not np.array_equal(res.routing, ref.routing):
            bad.append(f"{name}: routing")
    return bad


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alone_equals_every_batch_composition(policy, dtype):
    eng = _engine(policy, dtype)
    assert eng.batch_invariant_decoding
    runs = _target_runs(eng)
    assert len(runs[0][1].output_ids) == TARGET.max_new_tokens
    assert _differences(runs) == []


def test_a_session_turn_is_invariant_too(policy):
    """The target itself a prefix-cache hit (same session history), alone vs batched."""
    results = []
    for companions in (0, 3):
        eng = _engine(policy, "bfloat16")
        p = _ids(9, 200)
        first = eng.generate([GenerateRequest(p, TARGET, session_id="t")])[0]
        nxt = GenerateRequest(p + first.output_ids + [1, 2, 3], TARGET, session_id="t")
        res = eng.generate([*_companions(companions, 300), nxt])[-1]
        assert res.cached_tokens == len(p) + len(first.output_ids) - 1
        results.append(res)
    a, b = results
    assert a.output_ids == b.output_ids and a.output_logprobs == b.output_logprobs
    assert np.array_equal(a.routing, b.routing)


def test_negative_control_batch_dependent_matmul_breaks_it(policy):
    """With the plain batched matmul (M = live rows) the same compositions differ."""
    x, w = torch.randn(8, 128), torch.randn(256, 128)
    if torch.equal((x[:1] @ w.T)[0], (x @ w.T)[0]):
        pytest.skip("this BLAS gives M=1 and M=8 products the same bits: no negative control")
    eng = _engine(policy, "float32", batch_invariant=False)
    assert not eng.batch_invariant_decoding
    assert _differences(_target_runs(eng)) != []


def test_decode_tile_row_is_independent_of_the_other_rows(policy):
    """One decode step: a row's logits and routes do not depend on its companions or slot."""
    model = build_policy(ModelConfig(), VOCAB, seed=0)
    model.load_state_dict(policy.state_dict())
    lean = LeanQwen3Moe(model)

    def step(prompts, tokens):
        caches = [RowCache.empty(lean) for _ in prompts]
        for c, p in zip(caches, prompts, strict=True):
            lean.prefill(p, c)
        return lean.decode(tokens, caches)

    p = _ids(11, 1)
    alone_logits, alone_routes = step([p], [3])
    for others in (1, 4, TILE - 1):
        prompts = [_ids(3 + 5 * i, 9 + i) for i in range(others)]
        logits, routes = step([*prompts, p], [*range(5, 5 + others), 3])
        assert torch.equal(logits[-1], alone_logits[0])
        assert torch.equal(routes[-1], alone_routes[0])


def test_deterministic_config_batches_concurrent_callers(policy, tmp_path):
    """run.deterministic keeps engine.max_batch on the lean path; concurrent callers (batched
    by timing) get exactly what each gets alone."""
    import threading

    from t1.config import Config, EngineConfig, RunConfig
    from t1.model.policy import save_policy

    save_policy(policy, tmp_path / "p")
    cfg = Config(run=RunConfig(deterministic=True, threads=2), engine=EngineConfig(max_batch=8))
    eng = LocalEngine.from_config(cfg, tmp_path / "p")
    assert eng.max_batch == 8
    reqs = [
        GenerateRequest(_ids(4 + 3 * i, 500 + i), SamplingParams(max_new_tokens=16 + i, seed=i))
        for i in range(4)
    ]
    alone = [eng.generate([r])[0] for r in reqs]
    got = [None] * len(reqs)
    steps0 = eng.stats["decode_steps"]

    def run(i):
        got[i] = eng.generate([reqs[i]])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, g in zip(alone, got, strict=True):
        assert a.output_ids == g.output_ids and a.output_logprobs == g.output_logprobs
        assert np.array_equal(a.routing, g.routing)
    assert eng.stats["decode_steps"] - steps0 <= sum(len(a.output_ids) for a in alone)
