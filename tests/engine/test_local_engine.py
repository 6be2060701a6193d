"""The local engine on a real tiny Qwen3 MoE: batching, prefix cache, capture, sampling, abort."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from t1.config import ModelConfig
from t1.engine.base import Engine, GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.engine.sampling import sample_token
from t1.model import routing as rt
from t1.model.policy import build_policy, save_policy

VOCAB = 512
GREEDY = SamplingParams(temperature=0, max_new_tokens=24)


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(2)
    return build_policy(ModelConfig(), VOCAB, seed=0)


def _engine(policy, **kw) -> LocalEngine:
    # Each engine converts its own copy (the engine casts the model to its dtype).
    model = build_policy(ModelConfig(), VOCAB, seed=0)
    model.load_state_dict(policy.state_dict())
    return LocalEngine(model, **{"dtype": "float32", **kw})


def _prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


def test_is_an_engine(policy):
    assert isinstance(_engine(policy), Engine)


def test_batched_equals_one_at_a_time(policy):
    eng = _engine(policy, prefix_cache=False)
    prompts = _prompts([5, 17, 9])
    batch = eng.generate([GenerateRequest(p, GREEDY) for p in prompts])
    for p, b in zip(prompts, batch, strict=True):
        s = eng.generate([GenerateRequest(p, GREEDY)])[0]
        b.check(4, 2)
        assert b.output_ids == s.output_ids
        np.testing.assert_allclose(b.output_logprobs, s.output_logprobs, atol=1e-5)
        assert np.array_equal(b.routing, s.routing)


def test_capture_matches_a_full_forward(policy):
    """Routing rows cover prompt + outputs but the last; equal to an fp32 full forward's."""
    eng = _engine(policy, prefix_cache=False)
    (p,) = _prompts([11], seed=1)
    res = eng.generate([GenerateRequest(p, GREEDY)])[0]
    full = torch.tensor([p + res.output_ids])
    assert res.routing.shape == (full.shape[1] - 1, 4, 2) and res.routing.dtype == np.uint8
    with torch.no_grad(), rt.RoutingCapture(policy) as cap:
        logits = policy(full).logits[0].float()
    rows = cap.collect()[:-1].numpy()
    assert (rows == res.routing).mean() >= 0.99
    lp = torch.log_softmax(logits, -1)[len(p) - 1 : -1].gather(-1, full[0, len(p) :, None])[:, 0]
    np.testing.assert_allclose(lp.numpy(), res.output_logprobs, atol=1e-4)


def _turns(eng, prompt, n_turns, session):
    """A multi-turn trajectory: each prompt = previous prompt + output + 3 'observation' ids."""
    results, ids = [], list(prompt)
    obs = _prompts([3] * n_turns, seed=7)
    start = 0
    for t in range(n_turns):
        res = eng.generate([GenerateRequest(ids, GREEDY, session_id=session, routing_start=start)])[
            0
        ]
        res.check(4, 2)
        results.append(res)
        start = len(ids) + len(res.output_ids) - 1
        ids = ids + res.output_ids + obs[t]
    return results


def test_prefix_cache_is_exact_under_greedy_fp32(policy):
    (p,) = _prompts([8], seed=2)
    cached = _engine(policy, prefix_cache=True)
    fresh = _engine(policy, prefix_cache=False)
    a = _turns(cached, p, 4, "traj-1")
    b = _turns(fresh, p, 4, "traj-1")
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.output_ids == y.output_ids
        np.testing.assert_allclose(x.output_logprobs, y.output_logprobs, atol=1e-5)
        assert np.array_equal(x.routing, y.routing)
        if t:
            assert x.cached_tokens > 0 and y.cached_tokens == 0
    assert cached.stats["prefilled_tokens"] < fresh.stats["prefilled_tokens"]


def test_prefix_cache_falls_back_to_the_common_prefix(policy):
    (p,) = _prompts([12], seed=3)
    eng = _engine(policy, prefix_cache=True)
    first = eng.generate([GenerateRequest(p, GREEDY, session_id="s")])[0]
    changed = p[:6] + [(p[6] + 1) % VOCAB] + p[7:] + first.output_ids
    again = eng.generate([GenerateRequest(changed, GREEDY, session_id="s")])[0]
    assert again.cached_tokens == 6
    ref = _engine(policy, prefix_cache=False).generate([GenerateRequest(changed, GREEDY)])[0]
    assert again.output_ids == ref.output_ids
    assert np.array_equal(again.routing, ref.routing)


def test_routing_start_returns_only_new_rows(policy):
    eng = _engine(policy)
    (p,) = _prompts([10], seed=4)
    res = eng.generate([GenerateRequest(p, GREEDY, routing_start=10)])[0]
    assert res.routing.shape[0] == len(res.output_ids) - 1
    with pytest.raises(ValueError, match="routing_start"):
        GenerateRequest(p, GREEDY, routing_start=11)


def test_stop_token_ends_the_turn_and_is_kept(policy):
    eng = _engine(policy, prefix_cache=False)
    (p,) = _prompts([6], seed=5)
    free = eng.generate([GenerateRequest(p, GREEDY)])[0]
    stop = free.output_ids[3]
    first = free.output_ids.index(stop)
    sp = SamplingParams(temperature=0, max_new_tokens=24, stop_token_ids=(stop,))
    res = eng.generate([GenerateRequest(p, sp)])[0]
    assert res.finish_reason == "stop"
    assert res.output_ids == free.output_ids[: first + 1]
    assert free.finish_reason == "length" and len(free.output_ids) == 24


def test_seeded_sampling_is_reproducible(policy):
    eng = _engine(policy, dtype="bfloat16", prefix_cache=False)
    (p,) = _prompts([6], seed=6)
    one = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16, seed=11)
    a = eng.generate([GenerateRequest(p, one)])[0]
    b = eng.generate([GenerateRequest(p, one)])[0]
    c = eng.generate(
        [GenerateRequest(p, SamplingParams(temperature=1.0, max_new_tokens=16, seed=12))]
    )[0]
    assert a.output_ids == b.output_ids and a.output_logprobs == b.output_logprobs
    assert a.output_ids != c.output_ids


def test_sample_token_top_p_and_logprob():
    logits = torch.tensor([0.0, 3.0, 1.0, -2.0])
    g = torch.Generator().manual_seed(0)
    token, lp = sample_token(logits, 1.0, 0.01, g)  # only the most likely id survives
    assert token == 1
    assert lp == pytest.approx(float(torch.log_softmax(logits, -1)[1]))
    token, lp = sample_token(logits, 2.0, 1.0, g)
    assert lp == pytest.approx(float(torch.log_softmax(logits / 2.0, -1)[token]))
    assert sample_token(logits, 0.0, 1.0, None)[0] == 1
    counts = np.bincount([sample_token(logits, 1.0, 0.9, g)[0] for _ in range(300)], minlength=4)
    assert counts[3] == 0 and counts[1] > counts[2] > 0  # 0.9 keeps ids 1 and 2 only


def test_abort_before_and_during_generation(policy):
    eng = _engine(policy, dtype="bfloat16", prefix_cache=False)
    (p,) = _prompts([6], seed=8)
    eng.abort("early")
    res = eng.generate([GenerateRequest(p, GREEDY, request_id="early")])[0]
    assert res.finish_reason == "abort" and res.output_ids == []
    long = SamplingParams(temperature=1.0, max_new_tokens=4000, seed=1)
    box = {}
    t = threading.Thread(
        target=lambda: box.update(r=eng.generate([GenerateRequest(p, long, request_id="late")])[0])
    )
    t.start()
    time.sleep(0.5)
    eng.abort("late")
    t.join(timeout=60)
    res = box["r"]
    assert res.finish_reason == "abort" and 0 < len(res.output_ids) < 4000
    res.check(4, 2)


def test_concurrent_callers_are_batched_and_get_their_own_results(policy):
    eng = _engine(policy, prefix_cache=False)
    prompts = _prompts([4, 9, 6, 13], seed=9)
    want = [eng.generate([GenerateRequest(p, GREEDY)])[0].output_ids for p in prompts]
    got = [None] * 4

    def run(i):
        got[i] = eng.generate([GenerateRequest(prompts[i], GREEDY)])[0].output_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_update_weights_flushes_and_switches(policy, tmp_path):
    other = build_policy(ModelConfig(), VOCAB, seed=1)
    save_policy(other, tmp_path / "p1")
    eng = _engine(policy)
    (p,) = _prompts([7], seed=10)
    before = eng.generate([GenerateRequest(p, GREEDY, session_id="s")])[0]
    eng.update_weights(str(tmp_path / "p1"))
    after = eng.generate([GenerateRequest(p + before.output_ids, GREEDY, session_id="s")])[0]
    assert after.cached_tokens == 0  # the cache was flushed with the old weights
    ref = LocalEngine(build_policy(ModelConfig(), VOCAB, seed=1), dtype="float32")
    assert (
        after.output_ids
        == ref.generate([GenerateRequest(p + before.output_ids, GREEDY)])[0].output_ids
    )


def test_qwen3_5_moe_generates_with_routing():
    try:
        model = build_policy(ModelConfig(arch="qwen3_5_moe", layers=4), VOCAB, seed=0)
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"Qwen3.5 MoE unavailable in this transformers: {e}")
    eng = LocalEngine(model, dtype="float32")
    (p,) = _prompts([6], seed=11)
    sp = SamplingParams(temperature=0, max_new_tokens=6)
    first = eng.generate([GenerateRequest(p, sp, session_id="q")])[0]
    first.check(4, 2)
    nxt = p + first.output_ids + [1, 2]
    second = eng.generate([GenerateRequest(nxt, sp, session_id="q")])[0]
    assert second.cached_tokens == len(p) + len(first.output_ids) - 1
    ref = LocalEngine(build_policy(ModelConfig(arch="qwen3_5_moe"), VOCAB, seed=0), dtype="float32")
    assert second.output_ids == ref.generate([GenerateRequest(nxt, sp)])[0].output_ids


def test_bad_requests_are_refused_before_batching(policy):
    eng = _engine(policy)
    with pytest.raises(ValueError, match="outside"):
        eng.generate([GenerateRequest([1, VOCAB], GREEDY)])
    with pytest.raises(ValueError, match="context limit"):
        eng.generate([GenerateRequest([1] * 8192, GREEDY)])
    assert eng.generate([GenerateRequest([1, 2], GREEDY)])[0].output_ids


def test_abort_mid_decode_keeps_the_session_cache_consistent(policy):
    """An aborted row has fed its last output: the session must cache exactly those positions."""
    eng = _engine(policy, prefix_cache=True)
    (p,) = _prompts([6], seed=12)
    long = SamplingParams(temperature=0, max_new_tokens=4000)
    box = {}
    t = threading.Thread(
        target=lambda: box.update(
            r=eng.generate([GenerateRequest(p, long, session_id="ab", request_id="ab-1")])[0]
        )
    )
    steps0 = eng.stats["decode_steps"]
    t.start()
    deadline = time.monotonic() + 60
    while eng.stats["decode_steps"] < steps0 + 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    eng.abort("ab-1")
    t.join(timeout=60)
    first = box["r"]
    assert first.finish_reason == "abort"
    first.check(4, 2)
    nxt = p + first.output_ids + [3, 4]
    again = eng.generate([GenerateRequest(nxt, GREEDY, session_id="ab")])[0]
    assert again.cached_tokens == len(p) + len(first.output_ids)
    ref = _engine(policy, prefix_cache=False).generate([GenerateRequest(nxt, GREEDY)])[0]
    assert again.output_ids == ref.output_ids
    assert np.array_equal(again.routing, ref.routing)


def test_deterministic_mode_is_batch_invariant(policy, tmp_path):
    """run.deterministic: a request's tokens, logprobs and routing are bit-identical whether
    it is decoded alone or beside others (which requests share a batch depends on timing)."""
    from t1.config import Config, EngineConfig, RunConfig

    save_policy(policy, tmp_path / "p")
    cfg = Config(run=RunConfig(deterministic=True, threads=2), engine=EngineConfig(max_batch=8))
    eng = LocalEngine.from_config(cfg, tmp_path / "p")
    # the lean path is batch-invariant: deterministic mode keeps batching (t1/engine/lean.py)
    assert eng.max_batch == 8 and eng.batch_invariant_decoding
    prompts = _prompts([7, 19, 11], seed=3)
    params = [SamplingParams(temperature=1.0, max_new_tokens=20, seed=s) for s in (1, 2, 3)]
    together = eng.generate([GenerateRequest(p, sp) for p, sp in zip(prompts, params, strict=True)])
    for p, sp, t in zip(prompts, params, together, strict=True):
        alone = eng.generate([GenerateRequest(p, sp)])[0]
        assert alone.output_ids == t.output_ids
        assert alone.output_logprobs == t.output_logprobs
        assert np.array_equal(alone.routing, t.routing)


@pytest.mark.parametrize("threads, want", [(1, 1), (0, 2)])
def test_engine_threads_set_the_worker_thread_only(policy, tmp_path, threads, want):
    """`engine.threads` is the intra-op thread count of the thread that runs the model (0 =
    run.threads); the caller's own setting is left alone."""
    from t1.config import Config, EngineConfig, RunConfig

    save_policy(policy, tmp_path / "p")
    cfg = Config(run=RunConfig(threads=2), engine=EngineConfig(threads=threads))
    eng = LocalEngine.from_config(cfg, tmp_path / "p")
    seen, run = [], eng._generate_batch
    eng._generate_batch = lambda reqs: seen.append(torch.get_num_threads()) or run(reqs)
    eng.generate([GenerateRequest(_prompts([5])[0], GREEDY)])
    eng.close()
    assert seen == [want] and torch.get_num_threads() == 2
