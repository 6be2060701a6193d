"""megatron-core GPTModels of Qwen3-MoE and Qwen3.5-MoE: the actor (LM head) and the critic.

    from t1.train.megatron.model import transformer_config, build_actor, build_critic
    tc = transformer_config(hf_model.config, replay=True)
    actor = build_actor(tc, vocab)                  # GPTModel, local (non-TE) layer spec
    logits = actor(ids, positions, causal_mask(T))  # [B, T, V]

Mapping of the HF `Qwen3MoeConfig` (t1.model.policy.hf_config): RMSNorm (eps), q/k RMSNorm per head
(`qk_layernorm`), GQA (`num_query_groups` = kv heads, `kv_channels` = head_dim), RoPE
(non-interleaved = HF rotate_half, base = rope_theta), SwiGLU experts without bias, no dense
MLP, untied LM head, and the router as Qwen3 ships it: top-k over the logits then softmax over
the k chosen = softmax over all experts renormalized over the top k (`norm_topk_prob`;
`moe_router_pre_softmax=False`), no load-balancing loss, no dropout. The critic is the same
GPTModel whose output layer is `ValueHead` (Linear(hidden, 1) with bias), replicated on every
tensor-parallel rank, so its output is [B, T, 1].

Qwen3.5 (`Qwen3_5MoeTextConfig`, model_type `qwen3_5_moe_text`), on top of the above:
* token mixer per `layer_types`: megatron-core's own `GatedDeltaNet`
  (`megatron/core/ssm/gated_delta_net.py`; `experimental_attention_variant="gated_delta_net"`,
  `linear_attention_freq` = the layer pattern, `linear_*` head sizes and conv kernel) on the
  "linear_attention" layers, gated full attention (`attention_output_gate`: sigmoid(gate) *
  attention before o_proj) on the "full_attention" ones; partial RoPE (`rotary_percent` =
  `partial_rotary_factor`; text-only positions, so HF's multimodal RoPE sections coincide);
* every MoE layer has a shared expert (`moe_shared_expert_intermediate_size`) scaled by
  sigmoid(gate) (`moe_shared_expert_gate`);
* HF's RMSNorms (input, post-attention, q/k, final) are zero-centered: x_hat * (1 + w). The
  local (non-TE) norm of megatron-core, `WrappedTorchNorm`, refuses
  `layernorm_zero_centered_gamma`, so those positions use `ZeroCenteredRMSNorm` below (the same
  x_hat * (1 + w) TE's `zero_centered_gamma` computes); the weights copy 1:1. The GDN output norm
  is a plain RMSNorm in HF as in megatron-core: `RMSNorm` below (megatron-core's
  `WrappedTorchNorm` refuses sequence parallelism), as are all of Qwen3-MoE's norms;
* megatron-core's helper for this block spec
  (`get_transformer_block_with_experimental_attention_variant_spec`) requires Transformer
  Engine, so `qwen35_block_spec` assembles the same layers from the local spec: the GDN's input
  norm is the layer's `input_layernorm` (TE fuses it into `in_proj`; same computation).
* `GatedDeltaNet` needs flash-linear-attention (`fla`) to import; its recurrence runs either
  fla's Triton kernel (`chunk_gated_delta_rule`, GPU) or, with `deterministic_mode`,
  megatron-core's pure-torch `torch_chunk_gated_delta_rule`. `transformer_config` turns
  `deterministic_mode` on where CUDA is absent (the only path that runs on a CPU). The q/k
  L2 norm always calls fla's `l2norm` (a Triton kernel): see t1/train/megatron/__init__.py for
  what that means on a CPU.

Tensor parallelism: MoE with TP > 1 requires sequence parallelism (rows padded to a multiple
of TP: `seq_multiple`); every norm here supports it. The critic's `ValueHead` gathers the
sequence. `mark_parallel_weights` sets the TP attributes megatron-core skips when it does not
initialize weights, and the expert-gradient reduction for EP = 1 with ETP < TP.
tests/megatron/test_qwen35_tp_sp.py: TP 2 + SP (ETP 1, ETP 2, EP 2) equals world size 1.

Core attention: the local spec's, or Transformer Engine's with `attention="te"` (attention.py).
Token dispatcher: `allgather` (runs under gloo on the CPU and needs no CUDA streams; the
`alltoall` dispatcher builds a CUDA stream in its constructor), `alltoall` on GPUs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from t1.train.megatron.attention import core_attention

ARCHS = ("qwen3_moe", "qwen3_5_moe")
LAYER_TYPES = ("linear_attention", "full_attention")


def family(hf_config) -> str:
    """The family of an HF config: qwen3_moe, or qwen3_5_moe (model_type qwen3_5_moe_text or
    qwen3_5_moe); raises for any other."""
    mt = getattr(hf_config, "model_type", "")
    if mt == "qwen3_moe":
        return "qwen3_moe"
    if mt.startswith("qwen3_5_moe"):
        return "qwen3_5_moe"
    raise ValueError(
        f"train.backend megatron builds model.arch {' / '.join(ARCHS)}, got model_type {mt!r}"
    )


def check_arch(hf_config) -> None:
    """Refuse what this backend does not build or map (each error names the field)."""
    fam = family(hf_config)
    if (
        getattr(hf_config, "mlp_only_layers", [])
        or getattr(hf_config, "decoder_sparse_step", 1) != 1
    ):
        raise ValueError("train.backend megatron: every layer must be an MoE layer")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError("train.backend megatron: attention_bias is not mapped")
    if fam == "qwen3_moe":
        return
    c = hf_config
    types = getattr(c, "layer_types", None) or []
    if set(types) - set(LAYER_TYPES) or len(types) != getattr(c, "num_hidden_layers", -1):
        raise ValueError(
            f"train.backend megatron: qwen3_5_moe needs layer_types, one of {LAYER_TYPES} per "
            f"layer ({getattr(c, 'num_hidden_layers', '?')} layers), got {types or None}"
        )
    if getattr(c, "hidden_act", "silu") != "silu":
        raise ValueError(f"train.backend megatron: hidden_act {c.hidden_act!r} (silu only)")
    rp = getattr(c, "rope_parameters", None) or {}
    if rp.get("rope_type", "default") != "default":
        raise ValueError(
            f"train.backend megatron: qwen3_5_moe rope_type {rp.get('rope_type')!r} is not "
            "mapped (default only)"
        )
    if c.linear_num_value_heads % c.linear_num_key_heads:
        raise ValueError(
            "train.backend megatron: linear_num_value_heads must be a multiple of "
            "linear_num_key_heads"
        )


def transformer_config(
    hf_config,
    *,
    replay: bool = True,
    dtype: torch.dtype = torch.float32,
    dispatcher: str | None = None,
    router_fusion: bool = False,
    sequence_parallel: bool | None = None,
    recompute: bool = False,
    deterministic: bool | None = None,
):
    """The megatron-core TransformerConfig equal to an HF Qwen3-MoE / Qwen3.5-MoE config.
    `recompute`: full activation recompute of every layer (`recompute_granularity="full"`,
    uniform, 1 layer per checkpoint); the replayed routing is then reproduced in the recompute
    (replay.py). Losses are per-token (`calculate_per_token_loss`): see dataparallel.py.
    `deterministic` (`deterministic_mode`; default: on without CUDA): Qwen3.5's GatedDeltaNet
    runs megatron-core's torch recurrence instead of fla's Triton kernel."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    check_arch(hf_config)
    if replay and router_fusion:
        raise ValueError(
            "train.router_fusion with ppo.replay: the fused top-k path of megatron-core skips "
            "RouterReplay, so replay would silently do nothing; turn one of them off"
        )
    if dispatcher is None:
        dispatcher = "alltoall" if torch.cuda.is_available() else "allgather"
    from megatron.core import parallel_state as ps

    if sequence_parallel is None:  # megatron-core requires it for MoE with TP > 1
        sequence_parallel = ps.get_tensor_model_parallel_world_size() > 1
    c = hf_config
    if deterministic is None:
        deterministic = not torch.cuda.is_available()
    return TransformerConfig(
        **_qwen35_fields(c, deterministic),
        num_layers=c.num_hidden_layers,
        hidden_size=c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_query_groups=c.num_key_value_heads,
        kv_channels=c.head_dim,
        ffn_hidden_size=c.moe_intermediate_size,
        moe_ffn_hidden_size=c.moe_intermediate_size,
        num_moe_experts=c.num_experts,
        moe_router_topk=c.num_experts_per_tok,
        moe_router_pre_softmax=not _norm_topk_prob(c),
        moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0,
        moe_token_dispatcher_type=dispatcher,
        moe_grouped_gemm=False,
        moe_enable_routing_replay=replay,
        moe_router_fusion=router_fusion,
        normalization="RMSNorm",
        layernorm_epsilon=c.rms_norm_eps,
        qk_layernorm=True,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=True,
        perform_initialization=False,  # every weight comes from an HF checkpoint (convert.py)
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        masked_softmax_fusion=False,
        sequence_parallel=sequence_parallel,
        calculate_per_token_loss=True,
        pipeline_dtype=dtype,
        recompute_granularity="full" if recompute else None,
        recompute_method="uniform" if recompute else None,
        recompute_num_layers=1 if recompute else None,
        tensor_model_parallel_size=ps.get_tensor_model_parallel_world_size(),
        pipeline_model_parallel_size=ps.get_pipeline_model_parallel_world_size(),
        expert_model_parallel_size=ps.get_expert_model_parallel_world_size(),
        expert_tensor_parallel_size=ps.get_expert_tensor_parallel_world_size(),
    )


def _qwen35_fields(c, deterministic: bool) -> dict:
    """The TransformerConfig fields Qwen3.5 adds (none for Qwen3-MoE)."""
    if family(c) != "qwen3_5_moe":
        return {}
    return dict(
        experimental_attention_variant="gated_delta_net",
        linear_attention_freq=[int(t == "linear_attention") for t in c.layer_types],
        linear_conv_kernel_dim=c.linear_conv_kernel_dim,
        linear_key_head_dim=c.linear_key_head_dim,
        linear_value_head_dim=c.linear_value_head_dim,
        linear_num_key_heads=c.linear_num_key_heads,
        linear_num_value_heads=c.linear_num_value_heads,
        attention_output_gate=True,
        moe_shared_expert_intermediate_size=c.shared_expert_intermediate_size,
        moe_shared_expert_gate=True,
        deterministic_mode=deterministic,
    )


class ZeroCenteredRMSNorm(nn.Module):
    """RMSNorm with a zero-centered gain: x / rms(x) * (1 + weight), computed in fp32 and cast
    back (HF `Qwen3_5MoeRMSNorm`; TE's `zero_centered_gamma`). Built like megatron-core's norms
    (config, hidden_size, eps); the weight is marked `sequence_parallel` as theirs are."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_: object) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=config.params_dtype))
        self.weight.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class RMSNorm(nn.Module):
    """Plain RMSNorm: weight * (x / rms(x)), normalized in fp32 and cast back before the gain
    (HF `Qwen3MoeRMSNorm`; HF `Qwen3_5MoeRMSNormGated` before its gate, which megatron-core's
    GatedDeltaNet applies itself). Used where megatron-core's local norm (`WrappedTorchNorm`,
    which refuses sequence parallelism, required by MoE with TP > 1) would be: Qwen3.5's Gated
    DeltaNet output norm (`out_norm`) and every norm of Qwen3-MoE.

    The weight is replicated over TP and marked `sequence_parallel` as megatron-core's norms
    are, so `finalize_model_grads` sums its gradient over the TP group (it does so for marked
    weights when `config.sequence_parallel`). A layer norm sees its TP rank's slice of the
    sequence; the GDN `out_norm` sees the whole sequence but only its rank's value heads (the
    norm is per head, weight [value_head_dim]): either way each rank holds a part of the
    gradient (tests/megatron/test_qwen35_tp_sp.py shows the GDN norm's gradient wrong without
    the reduction)."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_: object) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))
        self.weight.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def qwen35_block_spec(tc, attention: str = "local"):
    """The decoder's TransformerBlockSubmodules for Qwen3.5 from megatron-core's local modules:
    per layer a `GatedDeltaNet` (tc.linear_attention_freq[l] == 1) or the gated `SelfAttention`,
    then the MoE with its gated shared expert; this pipeline stage's layers only."""
    import copy

    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.ssm import gated_delta_net as gdn
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    if any(tc.linear_attention_freq) and not gdn.HAVE_FLA:
        raise RuntimeError(
            "train.backend megatron, model.arch qwen3_5_moe: megatron-core's GatedDeltaNet needs "
            "flash-linear-attention (`fla`, Triton kernels, a GPU) to import and it does not "
            "import here (see t1/train/megatron/__init__.py)"
        )
    backend = LocalSpecProvider()
    full = get_gpt_layer_local_spec(
        num_experts=tc.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=True,
        normalization="RMSNorm",
    )
    full.submodules.input_layernorm = ZeroCenteredRMSNorm
    full.submodules.pre_mlp_layernorm = ZeroCenteredRMSNorm
    full.submodules.self_attention.submodules.q_layernorm = ZeroCenteredRMSNorm
    full.submodules.self_attention.submodules.k_layernorm = ZeroCenteredRMSNorm
    full.submodules.self_attention.submodules.core_attention = core_attention(attention)
    linear = copy.deepcopy(full)
    linear.submodules.self_attention = ModuleSpec(
        module=gdn.GatedDeltaNet,
        submodules=gdn.GatedDeltaNetSubmodules(
            in_proj=backend.column_parallel_linear(),
            out_norm=RMSNorm,
            out_proj=backend.row_parallel_linear(),
        ),
    )
    specs = [linear if t else full for t in tc.linear_attention_freq]
    offset = get_transformer_layer_offset(tc)
    local = specs[offset : offset + get_num_layers_to_build(tc)]
    return TransformerBlockSubmodules(layer_specs=local, layer_norm=ZeroCenteredRMSNorm)


def qwen3_block_spec(tc, attention: str = "local"):
    """The decoder's TransformerBlockSubmodules for Qwen3-MoE: megatron-core's local layer
    spec (full attention, q/k norms, MoE) with `RMSNorm` for every norm (input, q/k,
    pre-MLP, final) in place of its torch norm, which refuses sequence parallelism (which MoE
    with TP > 1 requires); this pipeline stage's layers only."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )

    layer = get_gpt_layer_local_spec(
        num_experts=tc.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=True,
        normalization="RMSNorm",
    )
    layer.submodules.input_layernorm = RMSNorm
    layer.submodules.pre_mlp_layernorm = RMSNorm
    layer.submodules.self_attention.submodules.q_layernorm = RMSNorm
    layer.submodules.self_attention.submodules.k_layernorm = RMSNorm
    layer.submodules.self_attention.submodules.core_attention = core_attention(attention)
    return TransformerBlockSubmodules(
        layer_specs=[layer] * get_num_layers_to_build(tc), layer_norm=RMSNorm
    )


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary rounded up to a multiple of TP (the vocab-parallel embedding needs it)."""
    return -(-vocab // tp) * tp


def _gpt(tc, hf_config, attention: str = "local"):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    if tc.experimental_attention_variant == "gated_delta_net":
        spec = qwen35_block_spec(tc, attention)
    else:
        spec = qwen3_block_spec(tc, attention)
    vocab, max_position = hf_config.vocab_size, hf_config.max_position_embeddings
    model = GPTModel(
        config=tc,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab(vocab, ps.get_tensor_model_parallel_world_size()),
        max_sequence_length=max_position,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        parallel_output=False,  # full-vocabulary logits on every TP rank
        share_embeddings_and_output_weights=False,
        position_embedding_type="rope",
        rotary_base=_rope_theta(hf_config),
        rotary_percent=_rotary_percent(hf_config),
    )
    mark_parallel_weights(model)
    return model


def mark_parallel_weights(model: nn.Module) -> None:
    """Set the parallelism attributes megatron-core leaves off the weights of this build.

    * `tensor_model_parallel` / `partition_dim` / `partition_stride` of the column- and
      row-parallel linears' and the vocab-parallel embedding's weights: megatron-core 0.16.1
      sets them inside its weight initialization only, which `perform_initialization=False`
      (weights come from HF checkpoints) skips. Without them a TP-sharded weight reads as a TP
      duplicate (`param_is_not_tensor_parallel_duplicate`: counted on TP rank 0 only), so
      the global gradient norm (dataparallel.grad_norm, megatron-core's optimizer) misses
      the other TP ranks' shards at TP > 1.
    * `allreduce = False` on the expert weights when EP = 1 and ETP < TP: megatron-core marks
      expert weights so (reduced over the expert-data-parallel group) only when EP > 1, but with
      ETP < TP the experts are replicated over TP ranks that each dispatch only their own
      tokens (their slice of the sequence under sequence parallelism), so each rank's expert
      gradient is a part: the expert-data-parallel group (DP x TP / ETP) is where it must be
      summed, not the dense data-parallel group (which excludes the TP peers)."""
    from megatron.core.tensor_parallel.layers import (
        ColumnParallelLinear,
        RowParallelLinear,
        VocabParallelEmbedding,
    )

    dims = ((ColumnParallelLinear, 0), (VocabParallelEmbedding, 0), (RowParallelLinear, 1))
    for mod in model.modules():
        for cls, dim in dims:
            w = getattr(mod, "weight", None)
            if isinstance(mod, cls) and isinstance(w, nn.Parameter):
                if not hasattr(w, "tensor_model_parallel"):  # what its init would have set
                    w.tensor_model_parallel, w.partition_dim, w.partition_stride = True, dim, 1
                break
    c = model.config
    if (
        c.expert_model_parallel_size == 1
        and (c.expert_tensor_parallel_size or c.tensor_model_parallel_size)
        < c.tensor_model_parallel_size
    ):
        for name, prm in model.named_parameters():
            if ".mlp.experts." in name:
                prm.allreduce = False


def build_actor(tc, hf_config, attention: str = "local") -> nn.Module:
    """The policy GPTModel (weights uninitialized: load them with convert.load_into);
    `attention`: the resolved train.attention (attention.py)."""
    m = _gpt(tc, hf_config, attention)
    m.t1_vocab = hf_config.vocab_size
    return m


class ValueHead(nn.Module):
    """Linear(hidden, 1) with bias, called like GPTModel's output layer -> (values, None).

    Replicated on every TP rank. Under sequence parallelism (`gather_sequence`) its input is
    this rank's slice of the sequence [S/TP, B, H]: it is all-gathered first, so every rank
    returns the values of the whole sequence, and the backward only splits the gradient back
    (`tensor_parallel_output_grad=False`): every TP rank computes the same loss from the same
    values, so its gradient is already the whole one (summing it, as the vocab-parallel output
    layer must, would count it TP times). For the same reason the head's own weight gradient
    needs no reduction over TP (it is not marked `sequence_parallel`)."""

    def __init__(self, hidden: int, dtype: torch.dtype, gather_sequence: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, hidden, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(1, dtype=dtype))
        self.gather_sequence = gather_sequence
        self.sequence_parallel = False  # GPTModel's inference path reads it; never gathers here

    def forward(self, x, weight=None, runtime_gather_output=None):  # noqa: ARG002 - GPTModel's call
        if self.gather_sequence:
            from megatron.core.tensor_parallel import mappings

            x = mappings.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False)
        return F.linear(x, self.weight, self.bias), None


def build_critic(tc, hf_config, attention: str = "local") -> nn.Module:
    """The critic: the actor's GPTModel with `ValueHead` as output layer (values [B, T, 1])."""
    import dataclasses

    from megatron.core import parallel_state as ps

    tc = dataclasses.replace(tc, moe_enable_routing_replay=False)  # the critic routes live
    m = _gpt(tc, hf_config, attention)
    if ps.is_pipeline_last_stage():
        sp = tc.sequence_parallel and ps.get_tensor_model_parallel_world_size() > 1
        m.output_layer = ValueHead(tc.hidden_size, tc.params_dtype, gather_sequence=sp)
    return m


def _rope_theta(c) -> float:
    rp = getattr(c, "rope_parameters", None) or {}
    return float(rp.get("rope_theta", getattr(c, "rope_theta", 10000.0)))


def _norm_topk_prob(c) -> bool:
    """Qwen3.5's router always renormalizes the top k (Qwen3_5MoeTopKRouter has no flag)."""
    return True if family(c) == "qwen3_5_moe" else bool(c.norm_topk_prob)


def _rotary_percent(c) -> float:
    rp = getattr(c, "rope_parameters", None) or {}
    return float(rp.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0)))


def causal_mask(t: int, device=None) -> torch.Tensor:
    """[1, 1, T, T] bool, True = masked (future). Passed explicitly: megatron-core's default
    mask is built on device "cuda"."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool, device=device), 1)[None, None]


def forward(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """input_ids [B, T] -> [B, T, V] logits (actor; padded vocab trimmed) or [B, T, 1] (critic).
    Under sequence parallelism the rows are right-padded to a multiple of TP and trimmed back."""
    b, t = input_ids.shape
    tp = seq_multiple(model)
    ids = F.pad(input_ids, (0, -t % tp))  # right padding: no real token attends to it
    pos = torch.arange(ids.shape[1], device=ids.device)[None].expand(b, -1)
    out = model(ids, pos, causal_mask(ids.shape[1], ids.device))[:, :t]
    vocab = getattr(model, "t1_vocab", None)
    return out[..., :vocab] if vocab is not None else out


def seq_multiple(model: nn.Module) -> int:
    """Positions per row must be a multiple of this (TP under sequence parallelism, else 1)."""
    c = model.config
    return c.tensor_model_parallel_size if c.sequence_parallel else 1
