"""The rollout fleet: several SGLang servers (or `t1 serve`s) behind one Engine.

    fleet = Fleet(["http://n4:30000", "http://n5:30000"], layers=48, k=8, num_experts=256)
    fleet.update_weights("results/<run>/ppo/steps/step_000002/train/actor")  # all, or FleetError
    traj = run_resampled(fleet, lambda: run_one(task, fleet, ...))  # re-sampled if a replica died
    pytest tests/engine/test_fleet.py

Routing: a trajectory's turns share a `session_id`; its first turn goes to the up replica with
the fewest requests in flight, and every later turn to the same replica (its prefix cache holds
the trajectory). Bodies and answers are SGLang's `/generate` schema (t1/engine/sglang.py).

Failure paths (issue 13), each a counter in `stats()` and an event in `events`:
* A replica that dies (connection refused or reset) or hangs (`health_failures` checks of
  `/health` in a row fail, one every `health_interval_s`) is marked down: every request in
  flight on it raises `ReplicaLost` at once, and so does every later turn of a trajectory that
  lived on it; `run_resampled` then runs that trajectory again from its first turn in a fresh
  sandbox (the half on the lost replica is never admitted), at most `max_resample` times.
  `t1 supervise` restarts the server (t1/engine/launch.py `watch` makes a hang visible to
  it); when it answers `/health` again the fleet loads the current weights into it, and only
  then routes to it.
* `update_weights` loads the step's HF export into every replica with `/update_weights_from_disk`
  {`model_path`, `weight_version`} (`weight_update: distributed`: the trainer pushed it,
  t1/engine/weight_update.py; a replica whose `/get_model_info` reports that version is left
  alone, the others load from disk: `weight_fallbacks`); if one answers `success: false` or an
  error, the fleet refuses every `generate` until a later update succeeds (`WeightUpdateFailed`),
  so no sample of the old weights is admitted. Each answer's `meta_info.weight_version` must
  equal the fleet's version, or it is `StaleWeights`: that replica is taken out until the
  current weights are loaded into it, the trajectory re-sampled.
* An answer without the routing capture it was asked for aborts that trajectory
  (`parse_response` raises; counted as `missing_routing`); it is never padded or dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from t1.engine.base import GenerateRequest, GenerateResult
from t1.engine.sglang import EngineError, parse_response, request_body
from t1.engine.weight_update import reported_version, version_of
from t1.httpjson import get_ok, post_json

T = TypeVar("T")


class FleetError(EngineError):
    """The fleet cannot serve: no replica up, or a failure path below."""


class ReplicaLost(FleetError):
    """The replica a request or its trajectory lived on died or hung; re-sample the trajectory."""


class WeightUpdateFailed(FleetError):
    """A replica did not load the step's weights: the step must stop before sampling."""


class StaleWeights(ReplicaLost):
    """An answer was sampled with weights other than the fleet's: that replica is taken out
    (the health monitor reloads the current weights into it) and the trajectory re-sampled."""


class _Down(Exception):
    """The replica did not answer at all (refused, reset, timed out)."""


@dataclass
class Replica:
    url: str
    up: bool = True
    incarnation: int = 0  # +1 each time it is marked down: in-flight requests of older ones fail
    failed_checks: int = 0
    in_flight: int = 0
    served: int = 0
    version: str | None = None  # weights it holds (None: unknown, e.g. restarted)


@dataclass
class _Trajectory:
    lost: bool = False


@dataclass
class FleetStats:
    requests: int = 0
    replica_lost: int = 0  # requests that failed because their replica died or hung
    resampled: int = 0  # trajectories run again after a replica loss
    resample_exhausted: int = 0  # trajectories that lost a replica max_resample + 1 times
    missing_routing: int = 0
    stale_weights: int = 0
    refused_after_failed_update: int = 0
    marked_down: int = 0
    rejoined: int = 0
    weight_updates: int = 0
    failed_weight_updates: int = 0
    weights_verified: int = 0  # distributed: replicas that reported the pushed version ...
    weight_fallbacks: int = 0  # ... and those loaded from disk instead
    per_replica: dict[str, int] = field(default_factory=dict)


class Fleet:
    """An Engine over several servers: session-affine routing, health, failover, weights."""

    def __init__(
        self,
        urls: list[str],
        *,
        layers: int,
        k: int,
        num_experts: int,
        timeout_s: float = 600.0,
        health_interval_s: float = 5.0,
        health_timeout_s: float = 10.0,
        health_failures: int = 3,
        max_resample: int = 2,
        rejoin_timeout_s: float = 1800.0,
        monitor: bool = True,
        weight_update: str = "disk",
    ) -> None:
        if weight_update not in ("disk", "distributed"):
            raise ValueError(f"weight_update must be disk | distributed, got {weight_update!r}")
        if not urls:
            raise ValueError("a fleet needs at least one replica URL (fleet.urls)")
        urls = [u.rstrip("/") for u in urls]
        if len(set(urls)) != len(urls):
            raise ValueError(f"fleet.urls lists a replica twice: {urls}")
        self.replicas = [Replica(u) for u in urls]
        self.layers, self.k, self.num_experts = layers, k, num_experts
        self.timeout_s, self.health_failures = timeout_s, health_failures
        self.health_interval_s, self.health_timeout_s = health_interval_s, health_timeout_s
        self.max_resample, self.rejoin_timeout_s = max_resample, rejoin_timeout_s
        self.weight_update = weight_update  # disk | distributed (the trainer pushes)
        self.version: str | None = None  # None: not set by this client; answers not checked
        self.path: str | None = None
        self.refusal: str | None = None  # set by a failed weight update: no sampling until fixed
        self._updating = False
        self.stats = FleetStats(per_replica={r.url: 0 for r in self.replicas})
        self.events: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._sessions: dict[str, tuple[Replica, int]] = {}
        self.served_by: dict[str, tuple[str, int]] = {}  # request id -> (replica, incarnation)
        self._rids: dict[str, Replica] = {}
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="t1-fleet")
        self._http = ThreadPoolExecutor(max_workers=512, thread_name_prefix="t1-fleet-http")
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="t1-fleet-health", daemon=True)
        if monitor:
            self._monitor.start()

    @classmethod
    def from_config(cls, cfg, urls: list[str] | None = None) -> Fleet:
        f, m = cfg.fleet, cfg.model
        return cls(
            urls or list(f.urls),
            layers=m.layers,
            k=m.top_k,
            num_experts=m.experts,
            timeout_s=cfg.engine.timeout_s,
            health_interval_s=f.health_interval_s,
            health_timeout_s=f.health_timeout_s,
            health_failures=f.health_failures,
            max_resample=f.max_resample,
            rejoin_timeout_s=f.rejoin_timeout_s,
            weight_update=f.weight_update,
        )

    # ------------------------------------------------------------ Engine protocol

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        if len(requests) == 1:  # the agent's case: stay on the caller's thread (its trajectory)
            return [self._one(requests[0])]
        traj = getattr(self._local, "traj", None)

        def run(req: GenerateRequest) -> GenerateResult:
            self._local.traj = traj
            return self._one(req)

        return list(self._pool.map(run, requests))

    def abort(self, request_id: str) -> None:
        with self._lock:
            rep = self._rids.get(request_id)
        if rep is not None and rep.up:
            try:
                self._post(rep, "/abort_request", {"rid": request_id}, timeout=10)
            except (_Down, EngineError):
                pass

    def close_session(self, session_id: str) -> None:
        with self._lock:
            entry = self._sessions.pop(session_id, None)
        if entry is not None and entry[0].up:
            try:
                self._post(entry[0], "/close_session", {"session_id": session_id}, timeout=10)
            except (_Down, EngineError):
                pass  # SGLang has no such route; t1 serve frees the session

    def update_weights(self, path: str, version: str | None = None) -> None:
        """Load `path` into every replica (a down one waits up to `rejoin_timeout_s`; with
        `weight_update: distributed` one that reports `version` keeps what it holds). On any
        failure the fleet refuses to sample until an update succeeds, and raises
        WeightUpdateFailed naming the replica and its answer."""
        version = version or version_of(path)
        with self._lock:
            self.refusal = f"weights {version} are not loaded everywhere yet"
            self._sessions.clear()  # old prefixes were computed with other weights
            self._updating = True  # the health monitor leaves down replicas to us meanwhile
        deadline = time.monotonic() + self.rejoin_timeout_s

        def load(rep: Replica) -> None:
            while not rep.up and time.monotonic() < deadline:
                if self._healthy(rep):
                    break  # restarted: load it now
                time.sleep(min(1.0, self.health_interval_s))
            try:
                if self.weight_update == "disk" or not self._holds(rep, version):
                    self._load(rep, str(path), version)
            except FleetError as e:
                self._event("weight_update_failed", rep, message=str(e))
                raise
            if not rep.up:
                self._rejoin(rep)

        try:  # all replicas at once: a 122B load takes minutes
            errors = []
            for fut in [self._pool.submit(load, rep) for rep in self.replicas]:
                try:
                    fut.result()
                except FleetError as e:
                    errors.append(str(e))
            with self._lock:
                if errors:
                    self.refusal = "; ".join(errors)
                    self.stats.failed_weight_updates += 1
                    raise WeightUpdateFailed(self.refusal)
                self.version, self.path, self.refusal = version, str(path), None
                self.stats.weight_updates += 1
        finally:
            self._updating = False
        self._event("weights_loaded", None, version=version)

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False)
        self._http.shutdown(wait=False)

    # ------------------------------------------------------------ trajectories

    def begin_trajectory(self) -> _Trajectory:
        """Mark the start of a trajectory on this thread; `.lost` says if a replica was lost."""
        self._local.traj = _Trajectory()
        return self._local.traj

    # ------------------------------------------------------------ one request

    def _pick(self, req: GenerateRequest) -> tuple[Replica, int]:
        with self._lock:
            if self.refusal is not None:
                self.stats.refused_after_failed_update += 1
                raise WeightUpdateFailed(f"refusing to sample: {self.refusal}")
            if req.session_id is not None and req.session_id in self._sessions:
                rep, inc = self._sessions[req.session_id]
                if rep.incarnation != inc:
                    raise self._lost(f"session {req.session_id}: its replica {rep.url} was lost")
                return rep, inc
            up = [r for r in self.replicas if r.up]
            if not up:
                raise FleetError(f"no replica is up ({', '.join(r.url for r in self.replicas)})")
            rep = min(up, key=lambda r: (r.in_flight, r.served))
            if req.session_id is not None:
                self._sessions[req.session_id] = (rep, rep.incarnation)
            return rep, rep.incarnation

    def _lost(self, message: str, kind: type[ReplicaLost] = ReplicaLost) -> ReplicaLost:
        """Count a loss and flag the calling thread's trajectory (caller holds the lock)."""
        self.stats.replica_lost += 1
        traj = getattr(self._local, "traj", None)
        if traj is not None:
            traj.lost = True
        return kind(message)

    def _one(self, req: GenerateRequest) -> GenerateResult:
        rep, inc = self._pick(req)
        with self._lock:
            rep.in_flight += 1
            self._rids[req.request_id] = rep
            self.stats.requests += 1
        try:
            fut: Future = self._http.submit(
                self._post, rep, "/generate", request_body(req), self.timeout_s
            )
            while True:
                try:
                    body = fut.result(timeout=0.1)
                    break
                except TimeoutError:
                    if rep.incarnation != inc:  # marked down by the health monitor: hung
                        with self._lock:
                            raise self._lost(
                                f"{rep.url} hung with request {req.request_id}"
                            ) from None
                except _Down as e:
                    self._mark_down(rep, inc, str(e))
                    with self._lock:
                        raise self._lost(
                            f"{rep.url} died with request {req.request_id}: {e}"
                        ) from None
        finally:
            with self._lock:
                rep.in_flight -= 1
                self._rids.pop(req.request_id, None)
        with self._lock:
            if rep.incarnation != inc:  # it answered, but was declared lost meanwhile
                raise self._lost(f"{rep.url} was lost while serving {req.request_id}")
            rep.served += 1
            self.stats.per_replica[rep.url] += 1
            self.served_by[req.request_id] = (rep.url, inc)
        meta = body.get("meta_info") if isinstance(body, dict) else None
        got = meta.get("weight_version") if isinstance(meta, dict) else None
        if self.version is not None and got != self.version:
            why = f"sampled with weights {got!r}, the fleet serves {self.version!r}"
            self._mark_down(rep, inc, why)
            with self._lock:
                self.stats.stale_weights += 1
                raise self._lost(f"{rep.url}: request {req.request_id} was {why}", StaleWeights)
        try:
            return parse_response(req, body, self.layers, self.k, self.num_experts)
        except EngineError as e:
            if "routed_experts" in str(e):
                with self._lock:
                    self.stats.missing_routing += 1
            raise EngineError(f"{rep.url}: {e}") from None

    # ------------------------------------------------------------ health

    def _watch(self) -> None:
        while not self._stop.wait(self.health_interval_s):
            for rep in self.replicas:
                self.check(rep)

    def check(self, rep: Replica) -> None:
        """One health check: count a failure (down after `health_failures`), or rejoin."""
        if not rep.up and self._updating:
            return
        ok = self._healthy(rep)
        if rep.up:
            rep.failed_checks = 0 if ok else rep.failed_checks + 1
            if rep.failed_checks >= self.health_failures:
                self._mark_down(rep, rep.incarnation, f"{rep.failed_checks} failed health checks")
            return
        if not ok or self.path is None:
            if ok and self.path is None:  # nothing loaded by this client: the launch weights
                self._rejoin(rep)
            return
        try:
            self._load(rep, self.path, self.version)
        except FleetError as e:
            self._event("rejoin_failed", rep, message=str(e))
            return
        self._rejoin(rep)

    def _rejoin(self, rep: Replica) -> None:
        with self._lock:
            rep.up, rep.failed_checks = True, 0
            self.stats.rejoined += 1
        self._event("rejoined", rep)

    def _mark_down(self, rep: Replica, inc: int, why: str) -> None:
        with self._lock:
            if rep.incarnation != inc or not rep.up:
                return
            rep.up, rep.incarnation, rep.version = False, rep.incarnation + 1, None
            self.stats.marked_down += 1
        self._event("replica_down", rep, message=why)

    def _healthy(self, rep: Replica) -> bool:
        return get_ok(rep.url + "/health", timeout=self.health_timeout_s)

    def _holds(self, rep: Replica, version: str | None) -> bool:
        """distributed: True iff the replica reports `version` (pushed); else a fallback."""
        held = reported_version(rep.url, self.health_timeout_s) == version
        with self._lock:
            self.stats.weights_verified += held
            self.stats.weight_fallbacks += not held
            rep.version = version if held else rep.version
        self._event("weights_verified" if held else "weight_fallback", rep, version=version)
        return held

    def _load(self, rep: Replica, path: str, version: str | None) -> None:
        body = {"model_path": path, "weight_version": version, "flush_cache": True}
        try:
            out = self._post(rep, "/update_weights_from_disk", body, timeout=self.timeout_s)
        except _Down as e:
            raise FleetError(
                f"{rep.url}: update_weights_from_disk({path}): no answer: {e}"
            ) from None
        if not (isinstance(out, dict) and out.get("success") is True):
            raise FleetError(f"{rep.url}: update_weights_from_disk({path}) failed: {out}")
        rep.version = version

    def _event(self, kind: str, rep: Replica | None, **extra: Any) -> None:
        ev = {"time": time.time(), "event": kind, "replica": rep.url if rep else None, **extra}
        with self._lock:
            self.events.append(ev)

    def summary(self) -> dict[str, Any]:
        """Counters and replica states, for rollout.json and the log."""
        with self._lock:
            s = dict(vars(self.stats))
            s["replicas"] = [{"url": r.url, "up": r.up, "served": r.served} for r in self.replicas]
            s["version"] = self.version
            return s

    # ------------------------------------------------------------ HTTP

    def _post(self, rep: Replica, path: str, payload: dict[str, Any], timeout: float) -> Any:
        """HTTP error: the request's fault (EngineError); no answer (refused, reset, timed out,
        cut short): the host's (_Down)."""
        return post_json(
            rep.url + path,
            payload,
            timeout=timeout,
            error=EngineError,
            unreachable=_Down,
            allow_empty=True,
        )


def fleet_urls(cfg) -> list[str]:
    """The replicas' base URLs: `fleet.urls`, else the Slurm allocation's server nodes (t1.engine.allocation)."""
    f = cfg.fleet
    if f.urls:
        if len(f.urls) != f.replicas:
            raise ValueError(
                f"fleet.urls has {len(f.urls)} URLs but fleet.replicas is {f.replicas}"
            )
        return list(f.urls)
    from t1.engine.allocation import allocation_hosts, split_allocation

    hosts, where = allocation_hosts(cfg)
    if hosts is None:
        raise ValueError(
            f"fleet.replicas is {f.replicas} but fleet.urls is empty and {where}: give fleet.urls "
            "or run inside the segment's Slurm allocation"
        )
    return [r["url"] for r in split_allocation(cfg, hosts)["replicas"]]


def before_rollout(engine: Any, policy: str | Path | None) -> None:
    """A fleet's step starts by loading `policy` (the previous step's HF export) everywhere
    (distributed: checking the trainer's push, disk for a replica without it); raises
    WeightUpdateFailed if a replica does not hold it after. Other engines: nothing."""
    if not isinstance(engine, Fleet):
        return
    if policy is None:
        raise FleetError("a fleet rollout needs --policy (the weights to load into the replicas)")
    engine.update_weights(str(policy))


def after_rollout(engine: Any, out: str | Path) -> None:
    """Write OUT/fleet.json (counters, events); raise if the fleet refused to sample meanwhile."""
    if not isinstance(engine, Fleet):
        return
    from t1.records import write_json_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        out / "fleet.json",
        {"schema_version": 1, "status": "complete", **engine.summary(), "events": engine.events},
    )
    if engine.refusal is not None:
        raise WeightUpdateFailed(f"the fleet refused to sample: {engine.refusal}")


def run_resampled(engine: Any, run: Callable[[], T]) -> T:
    """Run one trajectory; on a fleet, run it again (from scratch) when its replica was lost.

    `run` must start a fresh trajectory each call (new sandbox, new session). Returns the
    first run that lost no replica, or the last one (FAILED, so never admitted)."""
    if not isinstance(engine, Fleet):
        return run()
    for attempt in range(engine.max_resample + 1):
        ticket = engine.begin_trajectory()
        out = run()
        if not ticket.lost:
            return out
        with engine._lock:
            if attempt < engine.max_resample:
                engine.stats.resampled += 1
            else:
                engine.stats.resample_exhausted += 1
    return out
