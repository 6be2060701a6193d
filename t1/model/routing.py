"""R³ routing records: capture every MoE layer's top-k expert ids, store them compactly, replay them.

    pytest tests/test_routing.py

The routing record format (DESIGN §2, R³ row; §3, records on disk) - the one format
------------------------------------------------------------------------------------
Two forms of the same thing, and nothing else:

* Capture form (engine -> trajectory record). What an engine returns for one turn and what
  the record keeps: `Turn.routing`, a compact array `[rows, layers, k]` of expert ids with
  `Turn.routing_start`: row r is the routing of position routing_start + r of the turn's
  prompt + sampled ids (t1.engine.base). Compact = `uint8` while experts <= 256, else
  `uint16` (`record_dtype`, `compact`): 384 bytes per token at (48 layers, k = 8); SGLang's
  int32 wire form is 1536. A capture has no gaps, so it needs no mask. On disk the turns'
  captures are concatenated into the trajectory's `routing.npy` sidecar, each turn's
  `routing_rows` and `routing_start` in trajectory.jsonl (t1/agent/trajectory.py writes and
  validates it; a record's schema_version covers it).
* Stream form (TITO -> trainer). `t1.tito` maps captures onto a training stream's positions:
  `Segment.routing`, `int16 [T, layers, k]` with -1 in every slot of a position no capture
  maps onto ("placeholder: use live routing"); collated into `Batch.routing [B, T, L, k]`,
  padding -1 too. `replay` takes it as is (any integer dtype with that meaning). A compact
  array cannot hold -1 (255 is a real expert id at 256 experts): that is why placeholders
  exist only in the stream form, which is built in memory and never stored.
* SGLang returns `meta_info["routed_experts"]` as base64 of raw little-endian int32, shape
  `[seq_len - 1 - routed_experts_start_len, layers, top_k]`: `decode_sglang` turns it into the
  capture form, `encode_sglang` is the inverse (used by `t1 serve`).

Capture and replay
------------------
Each MoE layer's `mlp.gate` (`Qwen3MoeTopKRouter`, `Qwen3_5MoeTopKRouter`) returns
`(router_logits, weights, indices)` for the flattened tokens `[N, hidden]` of one forward.

    with RoutingCapture(model) as cap:          # taps every gate
        model(input_ids)                         # any number of forwards (prefill, decode steps)
    rows = cap.collect()                         # LongTensor [sum of N over forwards, layers, k]

    with replay(model, routing):                 # routing: int [B, T, layers, k], -1 = live
        logits = model(input_ids).logits         # input_ids: [B, T]

Under replay each gate returns `indices` = the replayed ids (the live top-k where a position is
a placeholder) and `weights` = softmax(live router logits) gathered at those ids and
renormalized when the model renormalizes (`norm_topk_prob`; Qwen3.5 always does), so gradients
still reach the gate weights. A position is a placeholder when any of its k slots is < 0. The
load-balancing loss stays off (`router_aux_loss_coef = 0`, `output_router_logits = False`).
Both work by standing in for each gate's `forward` (`_Tap`) while their block is active; the
replayed ids are applied before capture sees them, so capturing inside `replay` records them.

Checks that can fail (`RoutingCapture(model, stage=...)`, `mismatch`): inside `replay`,
stage "live" records the gate's own top-k before the replay overrides it - compared with the
engine's capture, that is the train-inference routing mismatch R³ exists to remove - and stage
"used" records the ids the experts module was really called with, which must equal the
capture wherever it is not a placeholder (with replay off they are the live ids, and the
check fails). t1.bench.gap_replay.replay_check and the hf trainer (t1/train/hf.py) report both.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

# ---------------------------------------------------------------- record format


def record_dtype(num_experts: int) -> np.dtype:
    """uint8 while `num_experts` <= 256, else uint16 (up to 65536 experts)."""
    if num_experts <= 0:
        raise ValueError(f"num_experts must be positive, got {num_experts}")
    if num_experts <= 256:
        return np.dtype(np.uint8)
    if num_experts <= 65536:
        return np.dtype(np.uint16)
    raise ValueError(f"{num_experts} experts do not fit a uint16 routing record")


def bytes_per_token(layers: int, k: int, num_experts: int) -> int:
    """Bytes one position takes in a compact record: layers * k * itemsize."""
    return layers * k * record_dtype(num_experts).itemsize


def compact(ids: np.ndarray | torch.Tensor, num_experts: int) -> np.ndarray:
    """Expert ids `[tokens, layers, k]` (any int dtype, no -1) -> compact numpy record."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids)
    if ids.ndim != 3:
        raise ValueError(f"routing must be [tokens, layers, k], got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise ValueError(f"expert ids outside [0, {num_experts}): min {ids.min()}, max {ids.max()}")
    return ids.astype(record_dtype(num_experts), copy=False)


def decode_sglang(payload: str, layers: int, k: int, num_experts: int) -> np.ndarray:
    """SGLang `meta_info["routed_experts"]` (base64 of int32) -> compact `[tokens, layers, k]`.

    Raises ValueError if the byte length is not a whole number of `[layers, k]` int32 rows or
    if an id is outside `[0, num_experts)` (SGLang writes -1 for non-MoE layers; our models
    have none, so a -1 means the server's model does not match the config).
    """
    raw = base64.b64decode(payload)
    row = layers * k * 4
    if len(raw) % row:
        raise ValueError(
            f"routed_experts: {len(raw)} bytes is not a multiple of layers*k*4 = {row}"
        )
    ids = np.frombuffer(raw, dtype="<i4").reshape(-1, layers, k)
    return compact(ids, num_experts)


def encode_sglang(ids: np.ndarray | torch.Tensor) -> str:
    """Compact or int `[tokens, layers, k]` -> base64 of little-endian int32 (SGLang's wire form)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    return base64.b64encode(np.ascontiguousarray(ids, dtype="<i4").tobytes()).decode("ascii")


# ---------------------------------------------------------------- the model's gates


def moe_gates(model: nn.Module) -> list[nn.Module]:
    """The router of every MoE layer, in layer order (Qwen3 / Qwen3.5 MoE layout)."""
    gates = []
    for name, module in model.named_modules():
        if (
            name.endswith("mlp.gate")
            and hasattr(module, "top_k")
            and hasattr(module, "num_experts")
        ):
            gates.append(module)
    if not gates:
        raise ValueError(f"{type(model).__name__} has no MoE gates (modules named '*.mlp.gate')")
    return gates


def routing_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, k, num_experts) of the model's routing records."""
    gates = moe_gates(model)
    return len(gates), int(gates[0].top_k), int(gates[0].num_experts)


class _Tap:
    """Stands in for one gate's `forward` while a capture or a replay is active.

    Replacing `forward` on the instance (rather than registering forward hooks) keeps the
    module on PyTorch's fast call path: capture then costs one Python call and one list
    append per gate and forward. Replay runs before capture, so a capture inside `replay`
    records the replayed ids whatever order the two blocks were entered in.
    """

    def __init__(self, gate: nn.Module) -> None:
        self.gate = gate
        self.inner = gate.forward  # the class's bound forward
        self.replay = None  # callable(output) -> output
        self.sinks: list[list[torch.Tensor]] = []  # the ids the gate returns (after replay)
        self.live_sinks: list[list[torch.Tensor]] = []  # the gate's own top-k (before replay)

    def __call__(self, hidden_states: torch.Tensor):
        out = self.inner(hidden_states)
        for sink in self.live_sinks:
            sink.append(out[2])
        if self.replay is not None:
            out = self.replay(out)
        for sink in self.sinks:
            sink.append(out[2])
        return out

    @staticmethod
    def of(gate: nn.Module) -> _Tap:
        tap = gate.__dict__.get("forward")
        if not isinstance(tap, _Tap):
            tap = _Tap(gate)
            gate.forward = tap
        return tap

    def release(self) -> None:
        if (
            self.replay is None
            and not self.sinks
            and not self.live_sinks
            and self.gate.__dict__.get("forward") is self
        ):
            del self.gate.forward


def moe_experts(model: nn.Module) -> list[nn.Module]:
    """The experts module beside every gate (`mlp.experts`), in layer order."""
    named = dict(model.named_modules())
    out = []
    for name, module in model.named_modules():
        if name.endswith("mlp.gate") and hasattr(module, "top_k"):
            experts = named.get(name[: -len("gate")] + "experts")
            if experts is None:
                raise ValueError(f"{name}: no `experts` module beside this gate")
            out.append(experts)
    return out


STAGES = ("routed", "live", "used")


class RoutingCapture:
    """Keep every MoE layer's top-k ids of each forward, on device, until `collect()`.

    `stage` says which ids:
      routed  what each gate returned: the replayed ids inside `replay` (the default; the
              engine's capture);
      live    the gate's own top-k of the live router logits, before any replay: what the
              layer would have chosen (compared with the engine's capture, the mismatch R3
              removes);
      used    the ids the experts module was actually called with (`mlp.experts`' input):
              proof that replay reached the computation, not only the gate's return value.
    Each forward appends one `[N, k]` tensor per layer (N = flattened tokens of that forward,
    batch-major). `collect()` concatenates them once and returns `[sum N, layers, k]` in
    forward order, then starts afresh. No device sync and no copy happen per forward.
    """

    def __init__(self, model: nn.Module, enabled: bool = True, stage: str = "routed") -> None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
        self.gates = moe_gates(model) if enabled else []
        self.experts = moe_experts(model) if enabled and stage == "used" else []
        self.enabled, self.stage = enabled, stage
        self._rows: list[list[torch.Tensor]] = [[] for _ in self.gates]
        self._hooks: list[Any] = []

    def __enter__(self) -> RoutingCapture:
        if self.stage == "used":
            for experts, rows in zip(self.experts, self._rows, strict=True):
                self._hooks.append(
                    experts.register_forward_pre_hook(_used_hook(rows), with_kwargs=True)
                )
            return self
        for gate, rows in zip(self.gates, self._rows, strict=True):
            tap = _Tap.of(gate)
            (tap.live_sinks if self.stage == "live" else tap.sinks).append(rows)
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.stage == "used":
            return
        for gate, rows in zip(self.gates, self._rows, strict=True):
            tap = _Tap.of(gate)
            tap.sinks = [s for s in tap.sinks if s is not rows]
            tap.live_sinks = [s for s in tap.live_sinks if s is not rows]
            tap.release()

    def collect(self) -> torch.Tensor:
        """LongTensor `[sum N, layers, k]` of everything captured since the last collect."""
        if not self.enabled:
            raise RuntimeError("RoutingCapture was created with enabled=False")
        per_layer = [torch.cat(rows) if rows else None for rows in self._rows]
        if any(p is None for p in per_layer):
            raise RuntimeError("no routing captured: did a forward run inside the capture?")
        counts = {p.shape[0] for p in per_layer}
        if len(counts) != 1:
            raise RuntimeError(f"layers captured different numbers of rows: {sorted(counts)}")
        for rows in self._rows:
            rows.clear()
        return torch.stack(per_layer, dim=1)


def _used_hook(rows: list[torch.Tensor]):
    def hook(module, args, kwargs):
        idx = args[1] if len(args) > 1 else kwargs.get("top_k_index")
        if idx is None:
            raise RuntimeError(f"{type(module).__name__} was called without top-k expert ids")
        rows.append(idx)

    return hook


def mismatch(chosen: np.ndarray, record: np.ndarray) -> tuple[int, int]:
    """(positions whose ids differ in any layer or slot, positions compared) between expert ids
    `[T, L, k]` and a record `[T, L, k]` with -1 placeholders (those positions are skipped).
    Slots are compared as sets per layer: the same experts in another order are a match."""
    record = np.asarray(record)
    valid = (record >= 0).reshape(len(record), -1).all(axis=1)
    a = np.sort(np.asarray(chosen)[valid], axis=-1)
    b = np.sort(record[valid].astype(a.dtype), axis=-1)
    return int((a != b).reshape(len(a), -1).any(axis=1).sum()), int(valid.sum())


@contextlib.contextmanager
def replay(model: nn.Module, routing: torch.Tensor) -> Iterator[None]:
    """Make every gate use the given expert ids in the forwards run inside this block.

    routing: integer tensor `[B, T, layers, k]` matching the `[B, T]` input of each forward
    in the block (-1 anywhere in a position's k slots = keep the live top-k there). Raises if
    a forward's token count differs from B * T. Replays do not nest.
    """
    gates = moe_gates(model)
    if routing.dim() != 4 or routing.shape[2] != len(gates) or routing.shape[3] != gates[0].top_k:
        raise ValueError(
            f"routing must be [B, T, {len(gates)}, {gates[0].top_k}], got {tuple(routing.shape)}"
        )
    taps = [_Tap.of(gate) for gate in gates]
    if any(tap.replay is not None for tap in taps):
        raise RuntimeError("replay blocks do not nest")
    try:
        for layer, (gate, tap) in enumerate(zip(gates, taps, strict=True)):
            ids = routing[:, :, layer, :].reshape(-1, routing.shape[3]).long()
            tap.replay = _replayer(ids, bool(getattr(gate, "norm_topk_prob", True)), layer)
        yield
    finally:
        for tap in taps:
            tap.replay = None
            tap.release()


def _replayer(ids: torch.Tensor, normalize: bool, layer: int):
    live = (ids < 0).any(dim=-1, keepdim=True)

    def apply(output):
        logits, _, live_idx = output
        if logits.shape[0] != ids.shape[0]:
            raise ValueError(
                f"replay: layer {layer} routed {logits.shape[0]} tokens, routing holds {ids.shape[0]}"
            )
        idx = torch.where(live.to(ids.device), live_idx, ids.to(live_idx.device))
        weights = replay_weights(logits, idx, normalize)
        return logits, weights, idx

    return apply


def replay_weights(logits: torch.Tensor, idx: torch.Tensor, normalize: bool) -> torch.Tensor:
    """Router weights for given expert ids.

    logits [N, E] (live router logits), idx [N, k] -> weights [N, k] in logits' dtype:
    softmax(logits) in float32 gathered at idx, divided by their sum when `normalize`.
    Differentiable w.r.t. logits (so the router stays trainable under replay).
    """
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights = probs.gather(-1, idx)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)
