"""megatron-core GPTModels for the Qwen3-MoE family: the actor (LM head) and the critic (value head).

    from t1.train.megatron.model import transformer_config, build_actor, build_critic
    tc = transformer_config(hf_model.config, replay=True)
    actor = build_actor(tc, vocab)                  # GPTModel, local (non-TE) layer spec
    logits = actor(ids, positions, causal_mask(T))  # [B, T, V]

Mapping of the HF `Qwen3MoeConfig` (t1.policy.hf_config): RMSNorm (eps), q/k RMSNorm per head
(`qk_layernorm`), GQA (`num_query_groups` = kv heads, `kv_channels` = head_dim), RoPE
(non-interleaved = HF rotate_half, base = rope_theta), SwiGLU experts without bias, no dense
MLP, untied LM head, and the router as Qwen3 ships it: top-k over the logits then softmax over
the k chosen = softmax over all experts renormalized over the top k (`norm_topk_prob`;
`moe_router_pre_softmax=False`), no load-balancing loss, no dropout. The critic is the same
GPTModel whose output layer is `ValueHead` (Linear(hidden, 1) with bias), replicated on every
tensor-parallel rank, so its output is [B, T, 1].

Token dispatcher: `allgather` (runs under gloo on the CPU and needs no CUDA streams; the
`alltoall` dispatcher builds a CUDA stream in its constructor), `alltoall` on GPUs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ARCHS = ("qwen3_moe",)


def check_arch(hf_config) -> None:
    """Refuse families this backend does not build (see the package docstring for why)."""
    mt = getattr(hf_config, "model_type", "")
    if mt != "qwen3_moe":
        raise ValueError(
            f"train.backend megatron builds model.arch qwen3_moe only, got model_type {mt!r}: "
            "Qwen3.5's Gated DeltaNet layers need megatron-core's fla-kernel path (GPU) and an "
            "HF<->Megatron mapping this package does not have yet (see t1/train/megatron/__init__.py)"
        )
    if (
        getattr(hf_config, "mlp_only_layers", [])
        or getattr(hf_config, "decoder_sparse_step", 1) != 1
    ):
        raise ValueError("train.backend megatron: every layer must be an MoE layer")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError("train.backend megatron: attention_bias is not mapped")


def transformer_config(
    hf_config,
    *,
    replay: bool = True,
    dtype: torch.dtype = torch.float32,
    dispatcher: str | None = None,
    router_fusion: bool = False,
    sequence_parallel: bool | None = None,
    recompute: bool = False,
):
    """The megatron-core TransformerConfig equal to an HF Qwen3-MoE config. `recompute`: full
    activation recompute of every layer (`recompute_granularity="full"`, uniform, 1 layer per
    checkpoint); the replayed routing is then reproduced in the recompute (replay.py).
    Losses are per-token (`calculate_per_token_loss`): see dataparallel.py."""
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
    return TransformerConfig(
        num_layers=c.num_hidden_layers,
        hidden_size=c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_query_groups=c.num_key_value_heads,
        kv_channels=c.head_dim,
        ffn_hidden_size=c.moe_intermediate_size,
        moe_ffn_hidden_size=c.moe_intermediate_size,
        num_moe_experts=c.num_experts,
        moe_router_topk=c.num_experts_per_tok,
        moe_router_pre_softmax=not c.norm_topk_prob,
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


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary rounded up to a multiple of TP (the vocab-parallel embedding needs it)."""
    return -(-vocab // tp) * tp


def _gpt(tc, vocab: int, max_position: int, rope_theta: float):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(
        num_experts=tc.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=True,
        normalization="RMSNorm",
    )
    return GPTModel(
        config=tc,
        transformer_layer_spec=spec,
        vocab_size=padded_vocab(vocab, ps.get_tensor_model_parallel_world_size()),
        max_sequence_length=max_position,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        parallel_output=False,  # full-vocabulary logits on every TP rank
        share_embeddings_and_output_weights=False,
        position_embedding_type="rope",
        rotary_base=rope_theta,
    )


def build_actor(tc, hf_config) -> nn.Module:
    """The policy GPTModel (weights uninitialized: load them with convert.load_into)."""
    m = _gpt(tc, hf_config.vocab_size, hf_config.max_position_embeddings, _rope_theta(hf_config))
    m.t1_vocab = hf_config.vocab_size
    return m


class ValueHead(nn.Module):
    """Linear(hidden, 1) with bias, called like GPTModel's output layer -> (values, None)."""

    def __init__(self, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, hidden, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(1, dtype=dtype))

    def forward(self, x, weight=None, runtime_gather_output=None):  # noqa: ARG002 - GPTModel's call
        return F.linear(x, self.weight, self.bias), None


def build_critic(tc, hf_config) -> nn.Module:
    """The critic: the actor's GPTModel with `ValueHead` as output layer (values [B, T, 1])."""
    import dataclasses

    from megatron.core import parallel_state as ps

    tc = dataclasses.replace(tc, moe_enable_routing_replay=False)  # the critic routes live
    m = _gpt(tc, hf_config.vocab_size, hf_config.max_position_embeddings, _rope_theta(hf_config))
    if ps.is_pipeline_last_stage():
        m.output_layer = ValueHead(tc.hidden_size, tc.params_dtype)
    return m


def _rope_theta(c) -> float:
    rp = getattr(c, "rope_parameters", None) or {}
    return float(rp.get("rope_theta", getattr(c, "rope_theta", 10000.0)))


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
