"""HF <-> Megatron weights (Qwen3-MoE, Qwen3.5-MoE; actor, critic), TP / PP / EP / ETP sharding.

    from t1.train.megatron.convert import hf_to_mcore, mcore_to_hf, shard, unshard
    full = hf_to_mcore(hf_model.state_dict(), hf_model.config, kind="actor")   # unsharded
    local = shard(full, Sizes(tp=2), Ranks(tp=1))                              # one rank's part
    hf = mcore_to_hf(unshard({ranks: local, ...}, sizes), hf_model.config, kind="actor")
    pairs = tensor_to_hf(name, join(parts, rule), config, "actor")   # one tensor (export.py)

Pure tensor code (no megatron import): every mapping is a copy, a concatenation or a split, so
a round trip is exact (tests/megatron/test_megatron_equivalence.py, test_qwen35.py: max
error 0.0).

Unsharded Megatron names use global layer and expert indices; a shard uses local ones:
* `embedding.word_embeddings.weight` [Vp, H]: HF embed_tokens, zero rows up to Vp (a multiple of
  TP); vocab-parallel: split on rows over TP; first pipeline stage only.
* `...self_attention.linear_qkv.weight` [(n + 2g) d, H]: per query group g, that group's n/g
  query heads, then its key head, then its value head (HF q/k/v_proj interleaved); column
  parallel: split on rows over TP, whole groups per rank.
* `...linear_proj.weight` [H, n d] = o_proj; row parallel: split on columns over TP.
* `...q_layernorm`, `k_layernorm`, `input_layernorm`, `pre_mlp_layernorm`, `mlp.router`,
  `decoder.final_layernorm`: replicated over TP (final norm: last stage only).
* `...mlp.experts.local_experts.E.linear_fc1.weight` [2F, H] = HF gate_up_proj[E] (gate rows,
  then up rows); ETP splits gate and up separately and concatenates each rank's pair;
  `linear_fc2.weight` [H, F] = down_proj[E], split on columns over ETP. EP: rank r holds
  experts r*E/ep .. (r+1)*E/ep - 1 as local experts 0 ...
* `output_layer.weight` [Vp, H] (actor: lm_head, split on rows over TP) or the critic's
  `output_layer.weight` [1, H] + `.bias` [1] (value_head, replicated); last stage only.
PP: layer l lives on stage l // (L / pp) as local layer l % (L / pp).

Qwen3.5 (`qwen3_5_moe`, model.py builds it), per layer after `layer_types`:
* full attention: `linear_qkv.weight` [(2n + 2g) d, H]: per query group, its n/g query heads,
  then their n/g output-gate heads, then its key head, then its value head (megatron-core's
  `attention_output_gate` layout); HF q_proj [2 n d, H] holds per head (query d, gate d).
  `q_layernorm` / `k_layernorm` = q_norm / k_norm (zero-centered gains, copied as they are).
* Gated DeltaNet (`linear_attn` -> `self_attention`): `in_proj.weight` [2 qk + 2 v + 2 nv, H]
  = the rows of HF in_proj_qkv (q, k, v), in_proj_z, in_proj_b, in_proj_a, concatenated in
  that order (megatron-core 0.16.1 splits its output as qkv | z | beta | alpha); `conv1d.weight`
  [2 qk + v, 1, K], `dt_bias`, `A_log` [nv], `out_norm.weight` [dv] (HF norm),
  `out_proj.weight` [H, v], all copied. TP: each of in_proj's six sections (q, k, v, z, b, a)
  and each of conv1d's three (q, k, v) is split over TP and a rank holds its part of every
  section (the per-rank layout GatedDeltaNet.forward splits); dt_bias / A_log on rows,
  out_proj on columns, out_norm replicated.
* shared expert: `mlp.shared_experts.linear_fc1.weight` [2 Fs, H] = gate_proj rows then
  up_proj rows (split per half over TP, like a dense SwiGLU), `linear_fc2.weight` = down_proj
  (columns over TP), `gate_weight` [1, H] = shared_expert_gate (replicated).
The norms of Qwen3.5 are zero-centered in HF and in model.ZeroCenteredRMSNorm alike: copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

ATTN = "self_attention"


@dataclass(frozen=True)
class Sizes:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1


@dataclass(frozen=True)
class Ranks:
    tp: int = 0
    pp: int = 0
    ep: int = 0
    etp: int = 0


def _prefix(kind: str) -> str:
    if kind not in ("actor", "critic"):
        raise ValueError(f"kind must be 'actor' or 'critic', got {kind!r}")
    return "model." if kind == "actor" else "backbone."


# ---------------------------------------------------------------- HF <-> unsharded Megatron


def hf_to_mcore(
    hf: dict[str, torch.Tensor], config, kind: str, tp: int = 1
) -> dict[str, torch.Tensor]:
    """HF state dict (Qwen3MoeForCausalLM, Qwen3_5MoeForCausalLM or t1.model.policy.Critic) ->
    unsharded Megatron names."""
    p = _prefix(kind)
    q35 = _is_qwen35(config)
    n, g, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    out: dict[str, torch.Tensor] = {}
    emb = hf[p + "embed_tokens.weight"]
    out["embedding.word_embeddings.weight"] = _pad_rows(emb, tp)
    for layer in range(config.num_hidden_layers):
        h, m = f"{p}layers.{layer}.", f"decoder.layers.{layer}."
        if q35 and config.layer_types[layer] == "linear_attention":
            la, a = h + "linear_attn.", m + f"{ATTN}."
            out[a + "in_proj.weight"] = torch.cat(
                [hf[la + f"in_proj_{x}.weight"] for x in ("qkv", "z", "b", "a")]
            )
            out[a + "conv1d.weight"] = hf[la + "conv1d.weight"]
            out[a + "dt_bias"] = hf[la + "dt_bias"]
            out[a + "A_log"] = hf[la + "A_log"]
            out[a + "out_norm.weight"] = hf[la + "norm.weight"]
            out[a + "out_proj.weight"] = hf[la + "out_proj.weight"]
        else:
            k = hf[h + "self_attn.k_proj.weight"].reshape(g, 1, d, -1)
            v = hf[h + "self_attn.v_proj.weight"].reshape(g, 1, d, -1)
            if q35:  # q_proj rows: per head (query d, gate d)
                qg = hf[h + "self_attn.q_proj.weight"].reshape(n, 2, d, -1)
                q = qg[:, 0].reshape(g, n // g, d, -1)
                parts = [q, qg[:, 1].reshape(g, n // g, d, -1), k, v]
            else:
                parts = [hf[h + "self_attn.q_proj.weight"].reshape(g, n // g, d, -1), k, v]
            out[m + f"{ATTN}.linear_qkv.weight"] = torch.cat(parts, 1).flatten(0, 2)
            out[m + f"{ATTN}.linear_proj.weight"] = hf[h + "self_attn.o_proj.weight"]
            out[m + f"{ATTN}.q_layernorm.weight"] = hf[h + "self_attn.q_norm.weight"]
            out[m + f"{ATTN}.k_layernorm.weight"] = hf[h + "self_attn.k_norm.weight"]
        out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        out[m + "mlp.router.weight"] = hf[h + "mlp.gate.weight"]
        gate_up, down = hf[h + "mlp.experts.gate_up_proj"], hf[h + "mlp.experts.down_proj"]
        for e in range(config.num_experts):
            out[m + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = gate_up[e]
            out[m + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = down[e]
        if q35:
            se, ms = h + "mlp.shared_expert.", m + "mlp.shared_experts."
            out[ms + "linear_fc1.weight"] = torch.cat(
                [hf[se + "gate_proj.weight"], hf[se + "up_proj.weight"]]
            )
            out[ms + "linear_fc2.weight"] = hf[se + "down_proj.weight"]
            out[ms + "gate_weight"] = hf[h + "mlp.shared_expert_gate.weight"]
    out["decoder.final_layernorm.weight"] = hf[p + "norm.weight"]
    if kind == "actor":
        out["output_layer.weight"] = _pad_rows(hf["lm_head.weight"], tp)
    else:
        out["output_layer.weight"] = hf["value_head.weight"]
        out["output_layer.bias"] = hf["value_head.bias"]
    return out


def mcore_to_hf(mc: dict[str, torch.Tensor], config, kind: str) -> dict[str, torch.Tensor]:
    """Inverse of `hf_to_mcore` (padding rows dropped): `tensor_to_hf` per tensor, then each
    layer's per-expert tensors stacked into the model's `experts.gate_up_proj` / `down_proj`."""
    out = {k: v for name, w in mc.items() for k, v in tensor_to_hf(name, w, config, kind)}
    return {k: v.contiguous() for k, v in stack_experts(out, config.num_experts).items()}


_SIMPLE = {  # megatron layer suffix -> HF layer suffix (copied as they are)
    f"{ATTN}.linear_proj.weight": "self_attn.o_proj.weight",
    f"{ATTN}.q_layernorm.weight": "self_attn.q_norm.weight",
    f"{ATTN}.k_layernorm.weight": "self_attn.k_norm.weight",
    f"{ATTN}.conv1d.weight": "linear_attn.conv1d.weight",
    f"{ATTN}.dt_bias": "linear_attn.dt_bias",
    f"{ATTN}.A_log": "linear_attn.A_log",
    f"{ATTN}.out_norm.weight": "linear_attn.norm.weight",
    f"{ATTN}.out_proj.weight": "linear_attn.out_proj.weight",
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.shared_experts.linear_fc2.weight": "mlp.shared_expert.down_proj.weight",
    "mlp.shared_experts.gate_weight": "mlp.shared_expert_gate.weight",
}


def tensor_to_hf(name: str, w: torch.Tensor, config, kind: str) -> list[tuple[str, torch.Tensor]]:
    """One UNSHARDED megatron tensor (global layer / expert indices) -> its HF tensors under
    the names HF checkpoints store (what `save_pretrained` writes: one entry per expert,
    `...mlp.experts.E.gate_proj.weight` / `up_proj` / `down_proj`). Works on meta tensors
    (names and shapes only). Raises naming a tensor it has no rule for."""
    p, vocab = _prefix(kind), config.vocab_size
    if name == "embedding.word_embeddings.weight":
        return [(p + "embed_tokens.weight", w[:vocab])]
    if name == "decoder.final_layernorm.weight":
        return [(p + "norm.weight", w)]
    if name == "output_layer.weight":
        return [("lm_head.weight", w[:vocab])] if kind == "actor" else [("value_head.weight", w)]
    if name == "output_layer.bias" and kind == "critic":
        return [("value_head.bias", w)]
    m = _LAYER.match(name)
    if m is None:
        raise ValueError(f"megatron weights: no HF name for {name!r}")
    h, rest = f"{p}layers.{m.group(1)}.", m.group(2)
    e = _EXPERT.match(rest)
    if e is not None:
        ex = f"{h}mlp.experts.{e.group(1)}."
        if e.group(2) == "linear_fc1.weight":  # gate rows, then up rows
            gate, up = w.chunk(2, 0)
            return [(ex + "gate_proj.weight", gate), (ex + "up_proj.weight", up)]
        if e.group(2) == "linear_fc2.weight":
            return [(ex + "down_proj.weight", w)]
    elif rest in _SIMPLE:
        return [(h + _SIMPLE[rest], w)]
    elif rest == f"{ATTN}.in_proj.weight":  # GDN: qkv | z | b | a
        qk2v, v_dim, nv = _gdn_dims(config)
        parts = w.split([qk2v, v_dim, nv, nv])
        return [
            (h + f"linear_attn.in_proj_{x}.weight", t)
            for x, t in zip("qkv z b a".split(), parts, strict=True)
        ]
    elif rest == "mlp.shared_experts.linear_fc1.weight":
        gate, up = w.chunk(2, 0)
        se = h + "mlp.shared_expert."
        return [(se + "gate_proj.weight", gate), (se + "up_proj.weight", up)]
    elif rest == f"{ATTN}.linear_qkv.weight":
        return _qkv_to_hf(h, w, config)
    raise ValueError(f"megatron weights: no HF name for {name!r}")


def _qkv_to_hf(h: str, w: torch.Tensor, config) -> list[tuple[str, torch.Tensor]]:
    n, g, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    q35 = _is_qwen35(config)
    per = 2 * (n // g) if q35 else n // g  # query (+ gate) rows per group, in heads
    qkv = w.reshape(g, per + 2, d, -1)
    if q35:  # HF q_proj rows: per head (query d, gate d)
        q = qkv[:, : n // g].reshape(n, 1, d, -1)
        gate = qkv[:, n // g : per].reshape(n, 1, d, -1)
        q = torch.cat([q, gate], 1).reshape(2 * n * d, -1)
    else:
        q = qkv[:, :per].reshape(n * d, -1)
    a = h + "self_attn."
    k, v = qkv[:, per].reshape(g * d, -1), qkv[:, per + 1].reshape(g * d, -1)
    return [(a + "q_proj.weight", q), (a + "k_proj.weight", k), (a + "v_proj.weight", v)]


_CKPT_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def expert_slot(name: str, numel: int) -> tuple[str, int] | None:
    """Where a checkpoint's per-expert tensor (`...experts.E.gate_proj.weight`, `numel`
    elements) lives in the model's stacked form: (stacked name, element offset), or None for
    any other name. gate_up_proj[E] = gate rows then up rows; down_proj[E] = down."""
    m = _CKPT_EXPERT.match(name)
    if m is None:
        return None
    e, which = int(m.group(2)), m.group(3)
    if which == "down":
        return m.group(1) + ".down_proj", e * numel
    return m.group(1) + ".gate_up_proj", e * 2 * numel + (numel if which == "up" else 0)


def stack_experts(hf: dict[str, torch.Tensor], experts: int) -> dict[str, torch.Tensor]:
    """Checkpoint names (one entry per expert) -> the model's state-dict names (each layer's
    experts stacked); every other tensor as it is."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[tuple[int, str], torch.Tensor]] = {}
    for k, v in hf.items():
        m = _CKPT_EXPERT.match(k)
        if m is None:
            out[k] = v
        else:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
    for base, g in groups.items():
        out[base + ".gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate")], g[(e, "up")]]) for e in range(experts)]
        )
        out[base + ".down_proj"] = torch.stack([g[(e, "down")] for e in range(experts)])
    return out


def _is_qwen35(config) -> bool:
    return getattr(config, "model_type", "").startswith("qwen3_5_moe")


def _gdn_dims(config) -> tuple[int, int, int]:
    """(rows of in_proj_qkv = 2 qk + v, v = value heads * dv, nv = value heads)."""
    qk = config.linear_num_key_heads * config.linear_key_head_dim
    v = config.linear_num_value_heads * config.linear_value_head_dim
    return 2 * qk + v, v, config.linear_num_value_heads


def _pad_rows(w: torch.Tensor, tp: int) -> torch.Tensor:
    rows = -(-w.shape[0] // tp) * tp
    return torch.cat([w, w.new_zeros(rows - w.shape[0], *w.shape[1:])]) if rows > w.shape[0] else w


# ---------------------------------------------------------------- sharding

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")
_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(.*)$")


def _split(w: torch.Tensor, parts: int, rank: int, dim: int) -> torch.Tensor:
    if w.shape[dim] % parts:
        raise ValueError(f"cannot split {tuple(w.shape)} in {parts} on dim {dim}")
    return w.chunk(parts, dim)[rank].contiguous()


def _split_glu(w: torch.Tensor, parts: int, rank: int) -> torch.Tensor:
    gate, up = w.chunk(2, 0)
    return torch.cat([_split(gate, parts, rank, 0), _split(up, parts, rank, 0)])


def _tp_rule(name: str) -> str:
    """How a non-expert tensor is laid out over TP: rows, cols, glu (each half on rows),
    gdn_in / gdn_conv (each GatedDeltaNet section on rows) or replicated."""
    if name in ("embedding.word_embeddings.weight",) or name.endswith("linear_qkv.weight"):
        return "rows"
    if name == "output_layer.weight":
        return "rows"  # the critic's [1, H] head is handled as replicated by the caller
    if name.endswith("linear_proj.weight"):
        return "cols"
    if name.endswith(f"{ATTN}.in_proj.weight"):
        return "gdn_in"
    if name.endswith(f"{ATTN}.conv1d.weight"):
        return "gdn_conv"
    if name.endswith((f"{ATTN}.dt_bias", f"{ATTN}.A_log")):
        return "rows"
    if name.endswith(f"{ATTN}.out_proj.weight"):
        return "cols"
    if name.endswith("mlp.shared_experts.linear_fc1.weight"):
        return "glu"
    if name.endswith("mlp.shared_experts.linear_fc2.weight"):
        return "cols"
    return "replicated"


def _gdn_sections(rule: str, get, name: str) -> list[int]:
    """Row sections of a GatedDeltaNet in_proj (q, k, v, z, b, a) or conv1d (q, k, v) named
    `name`, from the rows of the same layer's in_proj, conv1d and dt_bias as `get(name)` gives
    them (the whole tensors, or one TP rank's parts: the sections of that part)."""
    base = name.rsplit(".", 2)[0]  # "...self_attention"
    rows_in = get(base + ".in_proj.weight").shape[0]
    conv = get(base + ".conv1d.weight").shape[0]
    nv = get(base + ".dt_bias").shape[0]
    v = rows_in - conv - 2 * nv
    qk = (conv - v) // 2
    return [qk, qk, v, v, nv, nv] if rule == "gdn_in" else [qk, qk, v]


def _split_sections(w: torch.Tensor, sections: list[int], parts: int, rank: int) -> torch.Tensor:
    return torch.cat([_split(x, parts, rank, 0) for x in w.split(sections)])


def shard(
    full: dict[str, torch.Tensor],
    sizes: Sizes,
    ranks: Ranks,
    layers: int,
    experts: int,
    kind: str = "actor",
) -> dict[str, torch.Tensor]:
    """One rank's part of an unsharded Megatron state dict (local layer / expert indices)."""
    per_stage, per_ep = layers // sizes.pp, experts // sizes.ep
    first, last = ranks.pp == 0, ranks.pp == sizes.pp - 1
    out: dict[str, torch.Tensor] = {}
    for name, w in full.items():
        m = _LAYER.match(name)
        if m is None:
            if name.startswith("embedding.") and not first:
                continue
            if (name.startswith("output_layer.") or name.startswith("decoder.final")) and not last:
                continue
            rule = (
                "replicated"
                if (kind == "critic" and name.startswith("output_layer."))
                else _tp_rule(name)
            )
            out[name] = _apply(w, rule, sizes.tp, ranks.tp)
            continue
        layer, rest = int(m.group(1)), m.group(2)
        if layer // per_stage != ranks.pp:
            continue
        local = f"decoder.layers.{layer % per_stage}."
        e = _EXPERT.match(rest)
        if e is None:
            rule = _tp_rule(rest)
            if rule.startswith("gdn_") and sizes.tp > 1:
                secs = _gdn_sections(rule, full.__getitem__, name)
                out[local + rest] = _split_sections(w, secs, sizes.tp, ranks.tp)
            else:
                out[local + rest] = _apply(w, rule, sizes.tp, ranks.tp)
            continue
        expert, tail = int(e.group(1)), e.group(2)
        if expert // per_ep != ranks.ep:
            continue
        key = f"{local}mlp.experts.local_experts.{expert % per_ep}.{tail}"
        if tail == "linear_fc1.weight":
            out[key] = _split_glu(w, sizes.etp, ranks.etp) if sizes.etp > 1 else w
        else:
            out[key] = _split(w, sizes.etp, ranks.etp, 1) if sizes.etp > 1 else w
    return out


def _apply(w: torch.Tensor, rule: str, tp: int, rank: int) -> torch.Tensor:
    if tp == 1 or rule == "replicated":
        return w
    if rule == "glu":
        return _split_glu(w, tp, rank)
    return _split(w, tp, rank, 0 if rule == "rows" else 1)


def unshard(
    shards: dict[Ranks, dict[str, torch.Tensor]],
    sizes: Sizes,
    layers: int,
    experts: int,
    kind: str = "actor",
) -> dict[str, torch.Tensor]:
    """Inverse of `shard`: every rank's part (keyed by its Ranks) -> the unsharded state dict."""
    per_stage, per_ep = layers // sizes.pp, experts // sizes.ep
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    rules: dict[str, str] = {}
    for r, sd in shards.items():
        for name, w in sd.items():
            m = _LAYER.match(name)
            if m is None:
                glob, tp_index = name, r.tp
                rule = (
                    "replicated"
                    if (kind == "critic" and name.startswith("output_layer."))
                    else _tp_rule(name)
                )
            else:
                layer = int(m.group(1)) + r.pp * per_stage
                rest = m.group(2)
                e = _EXPERT.match(rest)
                if e is None:
                    glob, tp_index, rule = f"decoder.layers.{layer}.{rest}", r.tp, _tp_rule(rest)
                else:
                    expert = int(e.group(1)) + r.ep * per_ep
                    glob = f"decoder.layers.{layer}.mlp.experts.local_experts.{expert}.{e.group(2)}"
                    tp_index = r.etp
                    rule = "glu" if e.group(2) == "linear_fc1.weight" else "cols"
                    if sizes.etp == 1:
                        rule = "replicated"
            pieces.setdefault(glob, {})[tp_index] = w
            rules[glob] = rule
    out = {}
    for name, parts in pieces.items():
        rule, first = rules[name], min(parts)
        secs = None
        if rule.startswith("gdn_"):
            secs = _gdn_sections(rule, lambda n, i=first: pieces[n][i], name)
        out[name] = join([parts[k] for k in sorted(parts)], rule, secs)
    return out


def join(parts: list[torch.Tensor], rule: str, sections: list[int] | None = None) -> torch.Tensor:
    """The whole tensor from its TP (ETP) parts in rank order, laid out by `rule` (`_tp_rule`;
    experts: glu / cols / replicated); gdn_* rules need each part's row `sections`."""
    if rule == "replicated":
        return parts[0]
    if rule == "rows":
        return torch.cat(parts, 0) if len(parts) > 1 else parts[0]
    if rule == "cols":
        return torch.cat(parts, 1) if len(parts) > 1 else parts[0]
    if rule.startswith("gdn_"):
        split = [p.split(sections) for p in parts]
        return torch.cat([torch.cat(sec, 0) for sec in zip(*split, strict=True)], 0)
    if rule == "glu":
        halves = [p.chunk(2, 0) for p in parts]
        return torch.cat([x[0] for x in halves] + [x[1] for x in halves], 0)
    raise ValueError(f"unknown layout rule {rule!r}")


# ---------------------------------------------------------------- models


def local_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A GPTModel's tensors (its `_extra_state` entries dropped), detached, on the CPU."""
    return {
        k: v.detach().cpu()
        for k, v in model.state_dict().items()
        if not k.endswith("_extra_state") and isinstance(v, torch.Tensor)
    }


def load_local(model: torch.nn.Module, local: dict[str, torch.Tensor]) -> None:
    """Copy a shard into a GPTModel; raises naming any tensor missing or unexpected."""
    own = local_state(model)
    missing, extra = sorted(set(own) - set(local)), sorted(set(local) - set(own))
    if missing or extra:
        raise ValueError(f"megatron weights: missing {missing[:5]}, unexpected {extra[:5]}")
    with torch.no_grad():
        params = dict(model.named_parameters())
        for k, v in local.items():
            if own[k].shape != v.shape:
                raise ValueError(
                    f"megatron weights: {k} is {tuple(v.shape)}, model has {tuple(own[k].shape)}"
                )
            params[k].copy_(v)
