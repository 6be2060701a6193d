"""R³ on megatron-core: the rollout's expert ids replayed through the built-in `RouterReplay`.

    from t1.train.megatron.replay import install, replaying, RoutingObserver
    routers = install(actor)                      # once, after building the GPTModel
    with replaying(actor, batch.routing):         # [B, T, L, k], -1 = live routing
        logits = forward(actor, batch.input_ids)  # every MoE layer routes to the record
    with RoutingObserver(actor) as seen:          # what the routers actually chose
        forward(actor, ids); seen.routing()       # [B, T, L, k]

megatron-core (0.16.1 and 0.19 share this): `TransformerConfig(moe_enable_routing_replay=True)`
gives every `TopKRouter` a `RouterReplay`; its action RECORD stores the live top-k,
REPLAY_FORWARD uses `target_topk_idx`, REPLAY_BACKWARD pops `replay_backward_list` (one entry
per `set_target_indices`) for the recompute of activation checkpointing; the probabilities are
then the live scores gathered at the replayed ids (softmax over the k chosen when
`moe_router_pre_softmax` is off, = t1.model.routing's renormalized weights), so the router keeps its
gradient. `RouterReplay`'s static helpers act on EVERY instance in the process (actor and any
other model built with replay); this module addresses the actor's own instances instead. The
fused top-k (`moe_router_fusion`) never calls `RouterReplay`: model.transformer_config refuses it
with replay on.

Token order. A router sees the flattened hidden states [S * B, H] of its rank: sequence first,
token (s, b) at row s * B + b. With sequence parallelism, TP rank r holds rows s in
[r S / tp, (r + 1) S / tp) only; with packing (THD) the order is the packed one. A record
[B, T, L, k] is mapped to each local layer's [S * B, k] by `megatron_order`. Positions whose
record is -1 (placeholders) take the live top-k (`PlaceholderReplay`).

Per step: targets are set right before each forward and cleared (`clear_indices`, action
cleared) right after its backward, so nothing carries from one minibatch or step to the next.

Activation recompute (`train.recompute: true`, model.transformer_config): megatron-core 0.16.1
never switches the action itself; `set_target_indices` also queues the target on
`replay_backward_list`, and REPLAY_BACKWARD pops one entry per recomputed forward. `to_backward`
wraps the forward's output in an identity whose backward turns every router of the model to
REPLAY_BACKWARD as back-propagation enters it, so each layer's recompute routes to the record
it replayed in the forward (tests/megatron: the recompute's routers see the record, the queue
is empty afterwards, the gradients equal those without recompute).
"""

from __future__ import annotations

import contextlib

import torch


def _replay_classes():
    from megatron.core.transformer.moe.router_replay import RouterReplay, RouterReplayAction

    class PlaceholderReplay(RouterReplay):
        """RouterReplay whose -1 rows (placeholders) keep the live top-k."""

        keep_live = False  # set True to keep the router's own top-k (`live_topk`) under replay
        live_topk = None

        def get_replay_topk(
            self, scores, topk, num_groups=None, group_topk=None, default_compute_topk=None
        ):
            action = self.router_replay_action
            if action not in (
                RouterReplayAction.REPLAY_FORWARD,
                RouterReplayAction.REPLAY_BACKWARD,
            ):
                return super().get_replay_topk(
                    scores, topk, num_groups, group_topk, default_compute_topk
                )
            if action == RouterReplayAction.REPLAY_FORWARD:
                target = self.target_topk_idx
            else:
                target = self.replay_backward_list.pop(0)
            target = target.to(scores.device).long()
            if target.shape != (scores.shape[0], topk):
                raise ValueError(
                    f"router replay: record has shape {tuple(target.shape)} for "
                    f"{scores.shape[0]} tokens x top-{topk}"
                )
            hole = (target < 0).any(-1, keepdim=True)
            live = None
            if bool(hole.any()) or self.keep_live:
                _, live = default_compute_topk(
                    scores, topk, num_groups=num_groups, group_topk=group_topk
                )
                target = torch.where(hole, live, target)
            if self.keep_live:
                self.live_topk = live.detach()
            return scores.gather(1, target), target

    return RouterReplay, RouterReplayAction, PlaceholderReplay


def routers(model: torch.nn.Module) -> list:
    """The model's TopKRouter modules in layer order (this pipeline stage's layers)."""
    return [layer.mlp.router for layer in model.decoder.layers]


def install(model: torch.nn.Module) -> list:
    """Give each router of `model` a `PlaceholderReplay` (in place of its RouterReplay)."""
    RouterReplay, _, PlaceholderReplay = _replay_classes()
    out = []
    for r in routers(model):
        if r.router_replay is None:
            raise ValueError("router replay: the model was built without moe_enable_routing_replay")
        if not isinstance(r.router_replay, PlaceholderReplay):
            old = r.router_replay
            if old in RouterReplay.global_router_replay_instances:
                RouterReplay.global_router_replay_instances.remove(old)
            r.router_replay = PlaceholderReplay()
        out.append(r.router_replay)
    return out


def megatron_order(
    routing: torch.Tensor, layer: int, sp_rank: int = 0, sp_size: int = 1
) -> torch.Tensor:
    """Record [B, T, L, k] -> layer `layer`'s [T * B, k] (sequence first; the TP rank's slice
    of the sequence under sequence parallelism)."""
    b, t = routing.shape[:2]
    x = routing[:, :, layer].transpose(0, 1)  # [T, B, k]
    if sp_size > 1:
        if t % sp_size:
            raise ValueError(
                f"sequence parallelism: {t} positions do not split over {sp_size} ranks"
            )
        x = x.chunk(sp_size, 0)[sp_rank]
    return x.reshape(-1, routing.shape[-1]).long()


def layer_ids(model: torch.nn.Module) -> list[int]:
    """Global indices of this pipeline stage's layers (megatron-core's 1-based layer_number)."""
    return [layer.layer_number - 1 for layer in model.decoder.layers]


def set_targets(model: torch.nn.Module, routing: torch.Tensor) -> None:
    """Replay `routing` [B, T, L, k] (every layer of the model, -1 = live) in the next forward
    of `model`'s routers: each local router takes its global layer's record (the stage's
    layers under pipeline parallelism), its TP rank's slice of the sequence under sequence
    parallelism. The target is also queued for the recompute of activation checkpointing
    (`replay_backward_list`, popped first in first out: one entry per micro-batch in flight,
    the order 1F1B runs their backwards in)."""
    _, Action, _ = _replay_classes()
    sp_rank, sp_size = 0, 1
    if model.config.sequence_parallel:
        from megatron.core import parallel_state as ps

        sp_rank, sp_size = (
            ps.get_tensor_model_parallel_rank(),
            ps.get_tensor_model_parallel_world_size(),
        )
        pad = -routing.shape[1] % sp_size  # model.forward pads the rows the same way
        routing = torch.nn.functional.pad(routing, (0, 0, 0, 0, 0, pad), value=-1)
    for gid, r in zip(layer_ids(model), routers(model), strict=True):
        rr = r.router_replay
        rr.set_target_indices(megatron_order(routing, gid, sp_rank, sp_size))
        rr.set_router_replay_action(Action.REPLAY_FORWARD)


def clear(model: torch.nn.Module) -> None:
    """No target, no queued recompute target, no action on any of `model`'s routers."""
    for r in routers(model):
        r.router_replay.clear_indices()
        r.router_replay.clear_router_replay_action()


@contextlib.contextmanager
def replaying(model: torch.nn.Module, routing: torch.Tensor | None):
    """Replay `routing` [B, T, L, k] in every forward (and backward) inside the block."""
    if routing is None:
        yield
        return
    clear(model)
    try:
        set_targets(model, routing)
        yield
    finally:
        clear(model)


class RoutingObserver:
    """Records the experts each router actually dispatched to (its routing map), as [B, T, L, k]."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.maps: list[list[torch.Tensor]] = []

    def __enter__(self) -> RoutingObserver:
        rs = routers(self.model)
        self.maps = [[] for _ in rs]

        def hook(i):
            def fn(_mod, _inp, out):
                self.maps[i].append(out[1].detach().cpu())  # routing_map [N, E] bool

            return fn

        self._handles = [r.register_forward_hook(hook(i)) for i, r in enumerate(rs)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def routing(self, batch: int, k: int) -> torch.Tensor:
        """The last forward's choices: [B, T, L, k] expert ids, ascending per position."""
        per_layer = []
        for maps in self.maps:
            m = maps[-1]
            ids = torch.arange(m.shape[1]).expand_as(m)[m].reshape(m.shape[0], k)  # ascending
            per_layer.append(ids.reshape(-1, batch, k).transpose(0, 1))  # [B, T, k]
        return torch.stack(per_layer, 2)


def live_routing(model: torch.nn.Module, batch: int) -> torch.Tensor | None:
    """The routers' own top-k of the last replayed forward (kept while `keep_live` is set),
    as [B, T, L, k]; None when not kept."""
    per_layer = []
    for r in routers(model):
        live = getattr(r.router_replay, "live_topk", None)
        if live is None:
            return None
        per_layer.append(live.cpu().reshape(-1, batch, live.shape[-1]).transpose(0, 1))
    return torch.stack(per_layer, 2)


def keep_live(model: torch.nn.Module, on: bool) -> None:
    """Keep (or stop keeping) each replaying router's own top-k for the routing check."""
    for r in routers(model):
        if r.router_replay is not None and hasattr(r.router_replay, "keep_live"):
            r.router_replay.keep_live = on
            r.router_replay.live_topk = None


class _ToBackward(torch.autograd.Function):
    """Identity; its backward switches the given RouterReplay instances to REPLAY_BACKWARD."""

    @staticmethod
    def forward(ctx, x, instances):
        ctx.instances = instances
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _, Action, _ = _replay_classes()
        for rr in ctx.instances:
            if rr.router_replay_action is not None:
                rr.set_router_replay_action(Action.REPLAY_BACKWARD)
        return grad, None


def to_backward(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    """`out` unchanged; when back-propagation reaches it, the replaying routers of `model` turn
    to REPLAY_BACKWARD (the recompute of activation checkpointing pops the queued record)."""
    instances = [r.router_replay for r in routers(model) if r.router_replay is not None]
    if not instances or not torch.is_grad_enabled():
        return out
    return _ToBackward.apply(out, instances)


def whole_sequence(routes: torch.Tensor, model: torch.nn.Module, t: int) -> torch.Tensor:
    """[B, T', L, k] routes of this rank -> the whole sequence [B, t, L, k]: under sequence
    parallelism each tensor-parallel rank routed only its slice of the padded sequence, so the
    slices are gathered over the TP group (rank order = sequence order) and the padding cut."""
    from t1.train.megatron import model as M

    if M.seq_multiple(model) == 1:
        return routes
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    group = ps.get_tensor_model_parallel_group()
    parts = [torch.empty_like(routes) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, routes.contiguous(), group=group)
    return torch.cat(parts, 1)[:, :t]
