"""Weights from the trainer to the rollout replicas over a process group, SGLang's protocol.

    with WeightUpdateGroup(["http://n4:30000", "http://n5:30000"], backend="nccl") as group:
        record = group.send(stage_tensors(...), version=version_of(export_dir), bucket_bytes=1 << 29)

The trainer side of SGLang's distributed weight update, as slime does it
(slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py):
1. `open()`: POST `/init_weights_update_group` {`master_address`, `master_port`, `rank_offset`,
   `world_size`, `group_name`, `backend`} to every replica at once (one thread each) while this
   process joins the same group as rank 0; replica i's ranks start at 1 + the ranks before it
   (`ranks_per_replica`: an SGLang replica joins with every TP rank, `t1 serve` with one), so
   world_size = 1 + their sum. The group is a custom one (`init_custom_process_group`, SGLang's
   own helper: a TCPStore rendezvous, a PrefixStore, a registered non-default group), so it
   also works in a trainer that already has its default group.
2. `send(named_tensors, version, bucket_bytes)`: any iterable of (HF name, tensor), e.g. a
   pipeline stage's `stage_tensors`, cut into buckets of at most `bucket_bytes` (a larger
   tensor goes alone); per bucket, POST `/update_weights_from_distributed` {`names`, `dtypes`
   (SGLang's strings: "bfloat16"), `shapes`, `group_name`, `flush_cache`} to every replica
   and, at the same time, broadcast each tensor from group rank 0, in order. Only the last
   bucket carries `flush_cache: true` and `weight_version` (slime sends the version with every
   bucket; here a push that fails halfway never stamps it, so the fleet's version check sends
   that replica to the disk fallback). t1 serve stages the other buckets and loads them all at
   the last one (t1/engine/serve.py): a replica never holds half an update. Every answer must be
   `{"success": true}`; a replica that answers otherwise, or not at all, raises
   `WeightSyncError` naming its URL, which the caller treats as a dead replica (the fleet's
   disk fallback reloads it: t1/engine/fleet.py). Returns a `SendRecord`.
3. `close()`: POST `/destroy_weights_update_group` {`group_name`} and destroy the local group.

One group per pipeline stage (slime: "slime-pp_{rank}"): each stage's leader opens its own
group (its own `group_name` and port) and sends its layers with `send(..., commit=False)`;
once every stage succeeded (a barrier in the trainer), one leader calls `commit(version)`, which
loads all stages' tensors at once on each replica, and the groups close after that (a replica
drops what is staged when its last group closes); if any stage failed, nobody commits and the
replicas keep their old weights and version (the fleet then loads the export from disk).
`version_of(path)` is the weight_version both this push and the disk path stamp for an export,
so the fleet can check that a replica holds what the trainer pushed. `tensor_checksum` is the
per-tensor hash `t1 serve`'s `/weights_checksum` reports (tests and `t1 bench weights`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from t1.httpjson import HTTPJSONError, post_json

DEFAULT_GROUP = "weight_update_group"  # SGLang's default group_name


class WeightSyncError(RuntimeError):
    """A replica did not take a weight update; `urls` names every such replica."""

    def __init__(self, urls: list[str], message: str) -> None:
        super().__init__(message)
        self.urls = urls


def version_of(path: str | Path) -> str:
    """The weight_version of an HF export directory: its resolved path."""
    return str(Path(path).resolve())


def dtype_name(dtype: torch.dtype) -> str:
    """SGLang's dtype string: torch.bfloat16 -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    """The torch dtype of an SGLang dtype string ("bfloat16", "torch.float32"); ValueError else."""
    value = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return value


def tensor_checksum(t: torch.Tensor) -> str:
    """sha256 over dtype, shape and the raw bytes of `t` (bit-exact equality, any dtype)."""
    t = t.detach().contiguous().cpu()
    h = hashlib.sha256(f"{dtype_name(t.dtype)}{list(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def init_custom_process_group(
    backend: str, init_method: str, world_size: int, rank: int, group_name: str, timeout_s: float
) -> dist.ProcessGroup:
    """A process group beside (not as) the default one: SGLang's `init_custom_process_group`
    (python/sglang/srt/utils), itself from PyTorch and OpenRLHF. Blocks until all ranks join."""
    from torch.distributed.distributed_c10d import (
        Backend,
        PrefixStore,
        _new_process_group_helper,
        _world,
        rendezvous,
    )

    timeout = timedelta(seconds=timeout_s)
    url = urllib.parse.urlsplit(init_method)
    if url.scheme == "tcp":  # rank 0 hosts the store itself: torch's tcp:// rendezvous does not
        # under torchrun (TORCHELASTIC_USE_AGENT_STORE: every rank, 0 too, is a client of the
        # elastic agent's store), so a trainer rank would leave the replicas nobody to reach
        store = dist.TCPStore(
            url.hostname, url.port, world_size, is_master=rank == 0, timeout=timeout
        )
    else:
        store, rank, world_size = next(rendezvous(init_method, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = PrefixStore(group_name, store)
    # torch refuses a group name twice per process (a broken group's destroy may not have
    # finished), and every rank must pass the same one: the rendezvous address is both
    unique = f"{group_name}@{init_method}"
    pg, _ = _new_process_group_helper(
        world_size, rank, [], Backend(backend), store, group_name=unique, timeout=timeout
    )
    _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


@dataclass
class SendRecord:
    """What one `send` moved."""

    version: str
    replicas: int
    tensors: int
    buckets: int
    payload_bytes: int  # sum of the tensors' bytes (each replica receives all of them)
    bytes_moved: int  # payload_bytes x replicas
    peak_bucket_bytes: int  # the sender's largest bucket: what it holds at once
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _local_address(url: str) -> str:
    """This host's address on the route to `url`'s host (what the replica can reach)."""
    host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # UDP: no packet is sent, the kernel only picks the route
        return s.getsockname()[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def buckets(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list]:
    """Consecutive buckets of (name, tensor) of at most `bucket_bytes` (a larger tensor alone);
    yields (bucket, is_last): a bucket is sent once the next tensor proves it is not the last."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
        n = t.numel() * t.element_size()
        if bucket and size + n > bucket_bytes:
            yield bucket, False
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket, True


class WeightUpdateGroup:
    """Rank 0 of a weight-update group over `urls` (SGLang servers or `t1 serve`s)."""

    def __init__(
        self,
        urls: list[str],
        *,
        group_name: str = DEFAULT_GROUP,
        backend: str = "gloo",
        ranks_per_replica: int | list[int] = 1,
        master_address: str | None = None,
        master_port: int = 0,
        timeout_s: float = 600.0,
    ) -> None:
        if not urls:
            raise ValueError("a weight-update group needs at least one replica URL")
        self.urls = [u.rstrip("/") for u in urls]
        ranks = ranks_per_replica
        self.ranks = [ranks] * len(urls) if isinstance(ranks, int) else list(ranks)
        if len(self.ranks) != len(urls) or min(self.ranks) < 1:
            raise ValueError(f"ranks_per_replica {ranks_per_replica!r} does not fit {len(urls)}")
        self.group_name, self.backend, self.timeout_s = group_name, backend, timeout_s
        self.master_address = master_address or _local_address(self.urls[0])
        self.master_port = master_port
        self.world_size = 1 + sum(self.ranks)
        self.pg: dist.ProcessGroup | None = None
        self.broken: str | None = None  # set when a send failed: the group cannot be reused

    # ------------------------------------------------------------ HTTP

    def _post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The replica's `{success, message}`; raises WeightSyncError naming it otherwise."""
        try:
            out = post_json(url + path, body, timeout=self.timeout_s, error=HTTPJSONError)
        except HTTPJSONError as e:  # SGLang answers a failure with 400 {success, message}
            raise WeightSyncError([url], str(e)) from None
        if not (isinstance(out, dict) and out.get("success") is True):
            raise WeightSyncError([url], f"{url}{path} failed: {out}")
        return out

    def _all(self, path: str, bodies: list[dict[str, Any]]) -> list[Future]:
        return [_background(self._post, u, path, b) for u, b in zip(self.urls, bodies, strict=True)]

    def _wait(self, futs: list[Future], pending: list, what: str) -> None:
        """Wait for the local side (`pending`: callables returning True when done) and every
        replica's answer; a failed answer raises at once, naming every failed replica."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            failed = [f for f in futs if f.done() and f.exception() is not None]
            if failed:
                self._fail(futs, what)
            if all(f.done() for f in futs) and all(done() for done in pending):
                return
            if time.monotonic() > deadline:
                late = [u for u, f in zip(self.urls, futs, strict=True) if not f.done()]
                raise WeightSyncError(late, f"{what}: no answer within {self.timeout_s}s: {late}")
            time.sleep(0.002)

    def _fail(self, futs: list[Future], what: str) -> None:
        time.sleep(0.2)  # let the other answers of the same event arrive, to name them all
        errors = [(u, f.exception()) for u, f in zip(self.urls, futs, strict=True) if f.done()]
        errors = [(u, e) for u, e in errors if e is not None]
        self.broken = f"{what}: " + "; ".join(str(e) for _, e in errors)
        raise WeightSyncError([u for u, _ in errors], self.broken)

    # ------------------------------------------------------------ group

    def open(self) -> WeightUpdateGroup:
        if self.pg is not None:
            raise RuntimeError(f"weight-update group {self.group_name} is already open")
        port = self.master_port or _free_port()
        offsets = [1 + sum(self.ranks[:i]) for i in range(len(self.urls))]
        bodies = [
            {
                "master_address": self.master_address,
                "master_port": port,
                "rank_offset": off,
                "world_size": self.world_size,
                "group_name": self.group_name,
                "backend": self.backend,
            }
            for off in offsets
        ]
        futs = self._all("/init_weights_update_group", bodies)
        box: dict[str, Any] = {}

        def join() -> None:
            try:
                box["pg"] = init_custom_process_group(
                    self.backend,
                    f"tcp://{self.master_address}:{port}",
                    self.world_size,
                    0,
                    self.group_name,
                    self.timeout_s,
                )
            except Exception as e:  # noqa: BLE001 - handed to the caller below
                box["error"] = e

        def joined() -> bool:  # a local failure is not left to the replicas' timeout
            if "error" in box:
                raise WeightSyncError(
                    [], f"rank 0 could not join {self.group_name}: {box['error']}"
                )
            return "pg" in box

        _background(join)
        self._wait(futs, [joined], f"init_weights_update_group {self.group_name}")
        self.pg = box["pg"]
        return self

    def send(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        version: str,
        bucket_bytes: int,
        commit: bool = True,
    ) -> SendRecord:
        """Push every (name, tensor) to every replica; the last bucket commits (`flush_cache`,
        `weight_version`) unless `commit=False` (then `commit(version)` does, once every
        pipeline stage's group has sent its part)."""
        if self.pg is None:
            raise RuntimeError(f"weight-update group {self.group_name} is not open")
        if self.broken is not None:
            raise RuntimeError(f"weight-update group {self.group_name} is broken: {self.broken}")
        t0 = time.perf_counter()
        n_tensors = n_buckets = payload = peak = 0
        for bucket, last in buckets(named_tensors, bucket_bytes):
            tensors = [t.detach().contiguous() for _, t in bucket]
            size = sum(t.numel() * t.element_size() for t in tensors)
            body: dict[str, Any] = {
                "names": [n for n, _ in bucket],
                "dtypes": [dtype_name(t.dtype) for t in tensors],
                "shapes": [list(t.shape) for t in tensors],
                "group_name": self.group_name,
                "flush_cache": last and commit,
            }
            if last and commit:
                body["weight_version"] = str(version)
            futs = self._all("/update_weights_from_distributed", [body] * len(self.urls))
            works = [dist.broadcast(t, group=self.pg, group_src=0, async_op=True) for t in tensors]
            what = f"update_weights_from_distributed bucket {n_buckets} ({len(tensors)} tensors)"
            try:
                self._wait(futs, [w.is_completed for w in works], what)
                for w in works:
                    w.wait()
            except WeightSyncError:
                raise
            except Exception as e:  # the broadcast itself failed: a peer is gone
                self._fail_broadcast(futs, what, e)
            n_tensors, n_buckets = n_tensors + len(tensors), n_buckets + 1
            payload, peak = payload + size, max(peak, size)
        if n_buckets == 0:
            raise ValueError("send: no tensors to send")
        return SendRecord(
            version=str(version),
            replicas=len(self.urls),
            tensors=n_tensors,
            buckets=n_buckets,
            payload_bytes=payload,
            bytes_moved=payload * len(self.urls),
            peak_bucket_bytes=peak,
            seconds=round(time.perf_counter() - t0, 6),
        )

    def commit(self, version: str) -> None:
        """Load what every group staged on every replica and stamp `version`: an empty
        `/update_weights_from_distributed` with `flush_cache` (nothing is broadcast)."""
        if self.pg is None or self.broken is not None:
            raise RuntimeError(f"weight-update group {self.group_name}: {self.broken or 'closed'}")
        body = {"names": [], "dtypes": [], "shapes": [], "group_name": self.group_name}
        body.update(flush_cache=True, weight_version=str(version))
        futs = self._all("/update_weights_from_distributed", [body] * len(self.urls))
        self._wait(futs, [], f"commit {version}")

    def _fail_broadcast(self, futs: list[Future], what: str, error: Exception) -> None:
        deadline = time.monotonic() + min(10.0, self.timeout_s)
        while time.monotonic() < deadline and not any(
            f.done() and f.exception() is not None for f in futs
        ):
            time.sleep(0.01)
        if any(f.done() and f.exception() is not None for f in futs):
            self._fail(futs, what)
        self.broken = f"{what}: broadcast failed: {error}"
        raise WeightSyncError([], self.broken)

    def close(self) -> None:
        """Destroy the group on every replica and here. After a failed send the local side is
        shut down first (a replica stuck in a receive then fails it and drops the group) and
        no answer is waited for longer than 10 s."""
        pg, self.pg = self.pg, None
        if pg is None:
            return
        if self.broken is not None:
            _shutdown(pg, 10.0)
        body = {"group_name": self.group_name}
        futs = self._all("/destroy_weights_update_group", [body] * len(self.urls))
        if self.broken is None:
            dist.destroy_process_group(pg)
            self._wait(futs, [], f"destroy_weights_update_group {self.group_name}")
        else:
            concurrent.futures.wait(futs, timeout=min(10.0, self.timeout_s))

    def __enter__(self) -> WeightUpdateGroup:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _background(fn, *args) -> Future:
    """`fn(*args)` in a daemon thread (a replica that never answers cannot hold up exit)."""
    fut: Future = Future()

    def run() -> None:
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
            fut.set_exception(e)

    threading.Thread(target=run, name="t1-weight-update", daemon=True).start()
    return fut


def _shutdown(pg: dist.ProcessGroup, timeout_s: float) -> None:
    """Close a broken group's connections without waiting on its peers for long."""

    def run() -> None:
        with contextlib.suppress(Exception):
            dist.destroy_process_group(pg)

    t = threading.Thread(target=run, name="t1-weight-group-shutdown", daemon=True)
    t.start()
    t.join(timeout_s)


def reported_version(url: str, timeout_s: float = 10.0) -> str | None:
    """The weight_version a replica's GET /get_model_info reports (None: no answer)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/get_model_info", timeout=timeout_s) as r:
            info = json.loads(r.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return info.get("weight_version") if isinstance(info, dict) else None
