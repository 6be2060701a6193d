"""What moving the actor's weights to the rollout fleet costs per PPO step, by `fleet.weight_update`
(printed by `t1 segment --dry-run`; measured on the CPU by `t1 bench weights`).

    from t1.run.weight_traffic import per_step
    per_step(cfg, plan.model_spec(cfg))   # {"mode": ..., "actor_bytes": ..., "modes": {"disk": {...}, "distributed": {...}}}

Both modes write the trainer's sharded HF export of the actor once per step (each rank its own
slices; the recovery path of a replica that restarts, and the next segment's start). Then:

* `disk`: every replica loads the export back with /update_weights_from_disk. SGLang's loader
  reads every tensor of the checkpoint on every rank of the replica and keeps its own slice, so
  the shared filesystem serves `replicas x fleet.tp` reads of the whole actor per step.
* `distributed`: each pipeline stage's leader broadcasts its HF tensors, bucket by bucket, over
  the weight-update group (/init_weights_update_group, /update_weights_from_distributed); every
  rank of every replica receives every tensor once: `replicas x fleet.tp` copies over the
  network, no filesystem reads.

The critic is checkpointed with the trainer's state, never exported for serving; it moves
nowhere. Sizes come from the planner's model spec (t1.run.plan.model_spec, passed in) at the bytes of
`model.train_dtype` (the export's dtype).
"""

from __future__ import annotations

from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def per_step(cfg, spec) -> dict[str, Any]:
    """Bytes moved per PPO step in each mode, and which one the config chose; `spec`: the
    planner's t1.model.memory_spec.ModelSpec of the model."""
    dtype = cfg.model.train_dtype
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"model.train_dtype {dtype!r}: expected one of {sorted(DTYPE_BYTES)}")
    actor = spec.param_counts()["total"] * DTYPE_BYTES[dtype]
    f = cfg.fleet
    copies = f.replicas * f.tp
    modes = {
        "disk": {"written": actor, "read_from_disk": copies * actor, "over_network": 0},
        "distributed": {"written": actor, "read_from_disk": 0, "over_network": copies * actor},
    }
    return {
        "mode": f.weight_update,
        "actor_bytes": actor,
        "replicas": f.replicas,
        "ranks_per_replica": f.tp,
        "modes": modes,
    }


def render(traffic: dict[str, Any]) -> list[str]:
    """Lines for the dry run: the chosen mode first, the other for comparison."""
    gb = 1e9
    chosen = traffic["mode"]
    out = [
        f"weights to the fleet per step (fleet.weight_update: {chosen}; actor "
        f"{traffic['actor_bytes'] / gb:.1f} GB, {traffic['replicas']} replicas x "
        f"{traffic['ranks_per_replica']} ranks):"
    ]
    for mode in sorted(traffic["modes"], key=lambda m: m != chosen):
        m = traffic["modes"][mode]
        tag = "chosen" if mode == chosen else "instead"
        out.append(
            f"  {mode} ({tag}): export written {m['written'] / gb:.1f} GB, read back from disk "
            f"{m['read_from_disk'] / gb:.1f} GB, over the network {m['over_network'] / gb:.1f} GB"
        )
    return out
