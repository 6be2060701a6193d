"""The `local` engine: a tiny HF MoE in process, with routing capture and a per-session prefix cache.

    engine = LocalEngine.from_dir("results/tiny/policy/init", dtype="bfloat16", threads=2)
    [res] = engine.generate([GenerateRequest(ids, SamplingParams(stop_token_ids=(im_end,)))])

What it does, per batch of requests (at most `max_batch`, gathered from all calling threads by
one worker thread that owns the model):
1. prefix cache: a request with a `session_id` reuses that session's KV cache and routing rows
   for the longest common prefix of the cached positions and its prompt (a new turn's prompt
   normally extends the previous prompt + output, so only the new suffix is prefilled); on a
   mismatch the cache is cropped to the common prefix (full attention) or dropped (Qwen3.5's
   linear attention states cannot be cropped) and the rest is prefilled;
2. prefill of each request's uncached suffix, one request at a time (no padding);
3. decode of all requests together; rows leave the batch when they finish (stop id,
   max_new_tokens, context limit, abort);
4. routing: every gate's top-k ids are kept on device during the whole batch; one
   concatenation at the end, then one copy per request.

Two paths. The lean path (Qwen3 MoE, the default: t1/engine/lean.py) runs plain tensor code
over per-request KV caches (`RowCache`) and is batch-invariant: a request's ids, logprobs and
routing are bit-identical whatever shares its decode steps (fixed-shape tiles, attention per
row, per-row expert gathering), so deterministic mode batches too. The HF path (Qwen3.5, or
`lean=False`) runs the HF modules: caches left-padded into one batch with an attention mask,
routing by `t1.model.routing.RoutingCapture`; its numerics depend on the batch, so
deterministic mode decodes one request at a time there (`from_config`).

Inference runs in `dtype` (bf16 by default, so numerics differ from the fp32 trainer as they
do at scale). Sampling: temperature, top-p, per-request `torch.Generator` seeded from
`SamplingParams.seed` (deterministic mode); logprob conventions in t1/engine/base.py.

Modules: this one holds the engine and its worker; sampling one token is
t1/engine/sampling.py, the KV cache helpers (prefix match, batching) t1/engine/kv_cache.py.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from t1.engine.base import GenerateRequest, GenerateResult
from t1.engine.kv_cache import (
    batchable,
    common_prefix,
    croppable,
    first_of_session,
    row_cache,
    stack_caches,
)
from t1.engine.lean import LeanQwen3Moe, RowCache, supports
from t1.engine.sampling import sample_token
from t1.model import routing as rt
from t1.model.policy import load_policy, torch_dtype


@dataclass
class _Session:
    tokens: list[int]  # positions whose KV is in `cache`, in order
    cache: object  # transformers Cache, batch 1
    routing: torch.Tensor  # [len(tokens), layers, k] compact dtype


@dataclass
class _Row:
    """One request while it is being generated."""

    req: GenerateRequest
    cache: object = None
    reused: int = 0  # prompt positions served from the session cache
    prefix_routing: torch.Tensor | None = None  # [reused, L, k]
    prefill_rows: tuple[int, int] = (0, 0)  # span in the prefill capture
    decode_rows: list[int] = field(default_factory=list)  # indices in the decode capture
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    generator: torch.Generator | None = None
    length: int = 0  # positions in this row's cache


@dataclass
class _Job:
    kind: str  # generate | weights | close
    requests: list[GenerateRequest] = field(default_factory=list)
    arg: str = ""  # weights directory or session id
    done: threading.Event = field(default_factory=threading.Event)
    results: list[GenerateResult] = field(default_factory=list)
    error: BaseException | None = None


class LocalEngine:
    """Engine over an in-process HF MoE. Thread-safe: `generate` may be called concurrently."""

    def __init__(
        self,
        model: nn.Module,
        *,
        dtype: str = "bfloat16",
        prefix_cache: bool = True,
        max_sessions: int = 64,
        max_batch: int = 8,
        capture: bool = True,
        lean: bool | None = None,
        batch_invariant: bool = True,
        threads: int | None = None,
    ) -> None:
        """`lean`: None = the lean path where the model supports it (`t1.engine.lean.supports`);
        `batch_invariant=False` (tests' negative control) lets its matmuls take the batch's M.
        `threads`: torch intra-op threads of the worker thread that runs the model (None: what
        the process has). OpenMP keeps that setting per thread, so the caller's is unchanged;
        threads the process starts later inherit it (torch's lazy per-thread init)."""
        self.dtype = torch_dtype(dtype)
        self.model = model.to(self.dtype).eval()
        if lean and not supports(model):
            raise ValueError(f"{type(model).__name__}: the lean path supports plain Qwen3 MoE only")
        self.batch_invariant = batch_invariant
        self.threads = threads
        self._lean = (
            LeanQwen3Moe(self.model, batch_invariant)
            if lean is not False and supports(model)
            else None
        )
        self.layers, self.k, self.num_experts = rt.routing_shape(model)
        self.record_dtype = torch.uint8 if self.num_experts <= 256 else torch.int16
        self.max_position = int(model.config.max_position_embeddings)
        self.vocab_size = int(model.config.vocab_size)
        self.prefix_cache = prefix_cache
        self.max_sessions = max_sessions
        self.max_batch = max_batch
        self.capture = capture  # False only for benchmarks: results carry routing=None
        # Counters since construction (benchmarks read them; reset by assigning zeros).
        self.stats = {
            "prefilled_tokens": 0,
            "cached_tokens": 0,
            "decode_steps": 0,
            "prefill_s": 0.0,
            "decode_s": 0.0,
        }
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._aborted: dict[str, float] = {}
        self._abort_lock = threading.Lock()
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._worker_lock = threading.Lock()

    @classmethod
    def from_dir(cls, path: str | Path, *, threads: int | None = None, **kwargs) -> LocalEngine:
        """Load a policy directory; `threads` sets torch's intra-op threads (process-wide)."""
        if threads:
            torch.set_num_threads(threads)
        return cls(load_policy(path), **kwargs)

    @property
    def batch_invariant_decoding(self) -> bool:
        """True when a request's results do not depend on what shares its batch (lean path)."""
        return self._lean is not None and self._lean.batch_invariant

    @classmethod
    def from_config(cls, cfg, model_dir: str | Path) -> LocalEngine:
        """From a `t1.config.Config`: `engine:` section + `run.threads`. Which requests share a
        decode batch depends on timing; on the HF path the batch changes the numerics
        (measured: logprobs off by up to 0.08 in bf16 and a different sampled token), so
        deterministic mode (`run.deterministic`) decodes one request at a time there, as
        SGLang's `--enable-deterministic-inference` exists to prevent. The lean path is
        batch-invariant and keeps `engine.max_batch`."""
        e = cfg.engine
        engine = cls.from_dir(
            model_dir,
            threads=cfg.run.threads,
            dtype=e.dtype,
            prefix_cache=e.prefix_cache,
            max_sessions=e.max_sessions,
            max_batch=e.max_batch,
        )
        engine.threads = e.threads or cfg.run.threads
        if cfg.run.deterministic and not engine.batch_invariant_decoding:
            engine.max_batch = 1
        return engine

    # ------------------------------------------------------------ Engine protocol

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        if not requests:
            return []
        for req in requests:  # refuse here, so one bad request never fails a shared batch
            if len(req.input_ids) >= self.max_position:
                raise ValueError(
                    f"request {req.request_id}: prompt of {len(req.input_ids)} tokens reaches the "
                    f"context limit {self.max_position}"
                )
            if max(req.input_ids) >= self.vocab_size or min(req.input_ids) < 0:
                raise ValueError(
                    f"request {req.request_id}: token id outside [0, {self.vocab_size})"
                )
        return self._submit(_Job("generate", requests=list(requests))).results

    def abort(self, request_id: str) -> None:
        now = time.monotonic()
        with self._abort_lock:
            self._aborted = {r: t for r, t in self._aborted.items() if now - t < 3600}
            self._aborted[request_id] = now

    def close_session(self, session_id: str) -> None:
        self._submit(_Job("close", arg=session_id))

    def update_weights(self, path: str) -> None:
        self._submit(_Job("weights", arg=str(path)))

    def close(self) -> None:
        """Stop the worker thread (it is a daemon; calling this is optional)."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join()
            self._worker = None

    # ------------------------------------------------------------ worker

    def _submit(self, job: _Job) -> _Job:
        with self._worker_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._loop, name="t1-local-engine", daemon=True
                )
                self._worker.start()
        self._jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job

    def _loop(self) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)  # this thread's team (OpenMP: per thread)
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch = [job]
            # Gather more generate jobs that are already waiting, up to max_batch requests.
            while job.kind == "generate" and sum(len(j.requests) for j in batch) < self.max_batch:
                try:
                    nxt = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None or nxt.kind != "generate":
                    self._jobs.put(nxt)  # control jobs and shutdown run after this batch
                    break
                batch.append(nxt)
            try:
                if job.kind == "generate":
                    reqs = [r for j in batch for r in j.requests]
                    results = []
                    for i in range(0, len(reqs), self.max_batch):
                        results += self._generate_batch(reqs[i : i + self.max_batch])
                    for j in batch:
                        j.results, results = results[: len(j.requests)], results[len(j.requests) :]
                elif job.kind == "weights":
                    self._load_weights(job.arg)
                else:
                    self._sessions.pop(job.arg, None)
            except BaseException as e:  # hand the error to every caller of this batch
                for j in batch:
                    j.error = e
            for j in batch:
                j.done.set()

    def _load_weights(self, path: str) -> None:
        new = load_policy(path, dtype=self.dtype)
        self.model.load_state_dict(new.state_dict())
        self._sessions.clear()
        if self._lean is not None:  # its fused matrices are copies
            self._lean = LeanQwen3Moe(self.model, self.batch_invariant)

    # ------------------------------------------------------------ generation

    @torch.no_grad()
    def _generate_batch(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        if self._lean is not None:
            return self._generate_lean(requests)
        rows = [self._start_row(r, seen) for seen, r in first_of_session(requests)]
        with rt.RoutingCapture(self.model, enabled=self.capture) as cap:
            offset, logits = 0, []
            t0 = time.perf_counter()
            for row in rows:
                logits.append(self._prefill(row))
                n = len(row.req.input_ids) - row.reused
                row.prefill_rows, offset = (offset, offset + n), offset + n
            prefill = cap.collect() if self.capture else None
            t1 = time.perf_counter()
            self.stats["prefill_s"] += t1 - t0
            live = []
            for row, lg in zip(rows, logits, strict=True):
                self._sample(row, lg[None])
                if row.finish is None:
                    live.append(row)
            groups = [live] if all(batchable(r.cache) for r in live) else [[r] for r in live]
            offset = 0
            for group in groups:
                if group:
                    offset = self._decode(group, offset)
            decode = cap.collect() if self.capture and any(r.decode_rows for r in rows) else None
            self.stats["decode_s"] += time.perf_counter() - t1
        return [self._finish_row(row, prefill, decode) for row in rows]

    @torch.no_grad()
    def _generate_lean(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        """The lean path: per-request prefill, then batch-invariant decode steps."""
        lean = self._lean
        rows = [self._start_row(r, seen) for seen, r in first_of_session(requests)]
        t0, prefills, offset = time.perf_counter(), [], 0
        for row in rows:
            row.cache = row.cache if row.cache is not None else RowCache.empty(lean)
            logits, routes = lean.prefill(row.req.input_ids[row.reused :], row.cache)
            row.length = len(row.req.input_ids)
            row.prefill_rows, offset = (offset, offset + routes.shape[0]), offset + routes.shape[0]
            prefills.append(routes)
            self.stats["prefilled_tokens"] += routes.shape[0]
            self.stats["cached_tokens"] += row.reused
            self._sample(row, logits[None])
        t1 = time.perf_counter()
        self.stats["prefill_s"] += t1 - t0
        live, steps, captured = [r for r in rows if r.finish is None], [], 0
        while live:
            logits, routes = lean.decode([r.out[-1] for r in live], [r.cache for r in live])
            self.stats["decode_steps"] += 1
            steps.append(routes)
            for i, r in enumerate(live):
                r.length += 1
                r.decode_rows.append(captured + i)
                self._sample(r, logits[i : i + 1])
            captured += len(live)
            live = [r for r in live if r.finish is None]
        self.stats["decode_s"] += time.perf_counter() - t1
        decode = torch.cat(steps) if steps else None
        return [self._finish_row(row, torch.cat(prefills), decode) for row in rows]

    def _start_row(self, req: GenerateRequest, first_of_session: bool) -> _Row:
        row = _Row(req=req)
        if req.sampling.seed is not None:
            row.generator = torch.Generator().manual_seed(req.sampling.seed)
        session = None
        if self.prefix_cache and req.session_id is not None and first_of_session:
            session = self._sessions.pop(req.session_id, None)
        if session is not None:
            reuse = min(common_prefix(session.tokens, req.input_ids), len(req.input_ids) - 1)
            if reuse < len(session.tokens) and not croppable(session.cache):
                reuse = 0
            if reuse > 0:
                drop = len(session.tokens) - reuse
                if drop:
                    session.cache.crop(-drop)
                row.cache, row.reused = session.cache, reuse
                row.prefix_routing = session.routing[:reuse]
        return row

    def _prefill(self, row: _Row) -> torch.Tensor:
        ids = torch.tensor([row.req.input_ids[row.reused :]], dtype=torch.long)
        out = self.model(input_ids=ids, cache=row.cache, use_cache=True, logits_to_keep=1)
        row.cache = out.cache
        row.length = len(row.req.input_ids)
        self.stats["prefilled_tokens"] += ids.shape[1]
        self.stats["cached_tokens"] += row.reused
        return out.logits[0, -1].float()

    def _decode(self, rows: list[_Row], captured: int) -> int:
        """Decode `rows` together until each finishes; their caches are batched here.

        `captured` counts decode rows already in the capture; returns the new count."""
        cache, pads = stack_caches([r.cache for r in rows])
        width = max(r.length for r in rows)
        mask = torch.ones(len(rows), width, dtype=torch.long)
        for b, pad in enumerate(pads):
            mask[b, :pad] = 0
        active = list(range(len(rows)))
        while active:
            act = [rows[b] for b in active]
            ids = torch.tensor([[r.out[-1]] for r in act], dtype=torch.long)
            pos = torch.tensor([[r.length] for r in act], dtype=torch.long)
            mask = torch.cat([mask, torch.ones(len(act), 1, dtype=torch.long)], dim=1)
            out = self.model(
                input_ids=ids,
                attention_mask=mask if len(rows) > 1 else None,
                position_ids=pos,
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            self.stats["decode_steps"] += 1
            for i, r in enumerate(act):
                r.length += 1
                r.decode_rows.append(captured + i)
            captured += len(act)
            logits = out.logits[:, -1].float()
            for i, r in enumerate(act):
                self._sample(r, logits[i : i + 1])
            keep = [i for i, r in enumerate(act) if r.finish is None]
            for i, r in enumerate(act):
                if r.finish is not None:
                    r.cache = cache if len(rows) == 1 else row_cache(cache, i, pads[active[i]])
            if len(keep) < len(act):
                if keep:
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.batch_select_indices(index)
                    mask = mask[index]
                active = [active[i] for i in keep]
        return captured

    def _sample(self, row: _Row, logits: torch.Tensor) -> None:
        """Draw the next token of `row` from logits [1, V]; set `finish` when it ends."""
        if row.req.request_id in self._aborted:
            row.finish = "abort"
            return
        sp = row.req.sampling
        if sp.max_new_tokens == 0:
            row.finish = "length"
            return
        token, logprob = sample_token(logits[0], sp.temperature, sp.top_p, row.generator)
        row.out.append(token)
        row.logprobs.append(logprob)
        if token in sp.stop_token_ids:
            row.finish = "stop"
        elif len(row.out) >= sp.max_new_tokens or row.length + 1 >= self.max_position:
            row.finish = "length"

    def _finish_row(
        self, row: _Row, prefill: torch.Tensor | None, decode: torch.Tensor | None
    ) -> GenerateResult:
        req = row.req
        with self._abort_lock:
            self._aborted.pop(req.request_id, None)
        routing = None
        if self.capture:
            parts = [] if row.prefix_routing is None else [row.prefix_routing]
            start, stop = row.prefill_rows
            parts.append(prefill[start:stop].to(self.record_dtype))
            if row.decode_rows:
                parts.append(decode[torch.tensor(row.decode_rows)].to(self.record_dtype))
            full = torch.cat(parts)
            if full.shape[0] != row.length:
                raise RuntimeError(
                    f"request {req.request_id}: captured {full.shape[0]} routing rows for "
                    f"{row.length} processed positions"
                )
            if self.prefix_cache and req.session_id is not None:
                self._store_session(
                    req.session_id, _Session(processed_or_prompt(req, row), row.cache, full)
                )
            if req.return_routing:
                rows = len(req.input_ids) + len(row.out) - 1
                routing = full[req.routing_start : rows].numpy()
                if routing.dtype != rt.record_dtype(self.num_experts):
                    routing = routing.astype(rt.record_dtype(self.num_experts))
        elif self.prefix_cache and req.session_id is not None:
            empty = torch.zeros(row.length, self.layers, self.k, dtype=self.record_dtype)
            self._store_session(
                req.session_id, _Session(processed_or_prompt(req, row), row.cache, empty)
            )
        return GenerateResult(
            request_id=req.request_id,
            output_ids=list(row.out),
            output_logprobs=list(row.logprobs),
            finish_reason=row.finish or "length",
            routing=routing,
            routing_start=req.routing_start,
            prompt_tokens=len(req.input_ids),
            cached_tokens=row.reused,
        )

    def _store_session(self, session_id: str, session: _Session) -> None:
        self._sessions[session_id] = session
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)


def processed_or_prompt(req: GenerateRequest, row: _Row) -> list[int]:
    """Token ids of the positions in the row's cache, in order.

    Normally the prompt + every output but the last (never fed back); a row aborted
    mid-decode has also fed its last output, so the cache length decides.
    """
    tokens = (req.input_ids + row.out)[: row.length]
    if len(tokens) != row.length:
        raise RuntimeError(
            f"request {req.request_id}: cache holds {row.length} positions, ids {len(tokens)}"
        )
    return tokens
