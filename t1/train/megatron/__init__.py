"""The `megatron` training backend: megatron-core GPTModel actor and critic, built-in router replay.

    train: {backend: megatron}  in the campaign YAML, then  t1 train --config F --stage ppo ...
    pytest tests/megatron -q                                         # CPU equivalence tests

Modules: `runtime` (distributed init, the megatron-core compatibility fix, the CPU check),
`model` (TransformerConfig + GPTModel for the Qwen3-MoE family, the value-head critic),
`convert` (HF <-> Megatron weights, TP/PP/EP/ETP sharding), `replay` (R³ through
`RouterReplay`), `trainer` (`MegatronTrainer`, the `t1.train.protocol.Trainer` of this backend),
`plan` (the memory plan checked before launch; actor/critic offload in turn), `dataparallel`
(rows per DP rank, gradient reduction, global grad norm), `checkpoint` (one file per rank in
t1.ckpt's atomic protocol), `stage` (the PPO stage's directory under torchrun: per-rank
checkpoints, rank 0 writes).

Families. `model.arch: qwen3_moe` (full attention, Qwen3-MoE) is built and proven equal to the
hf backend. `qwen3_5_moe` (Qwen3.5: 3 of every 4 layers Gated DeltaNet linear attention, gated
full attention, a gated shared expert, partial RoPE) is refused; no layer is faked. What
megatron-core 0.16.1 (the version installed and tested here, Python 3.11) has: the Gated
DeltaNet layer (`megatron/core/ssm/gated_delta_net.py`, chosen by
`experimental_attention_variant="gated_delta_net"` + `linear_attention_freq`), gated attention
output (`attention_output_gate`), the shared-expert gate (`moe_shared_expert_gate`) and partial
RoPE (`rotary_percent`). What is missing for this backend: (1) `GatedDeltaNet.__init__` raises
ImportError unless `fla` (flash-linear-attention, Triton kernels) imports, although with
`deterministic_mode` its forward uses the pure-torch `torch_chunk_gated_delta_rule`; fla is not
a dependency of megatron-core nor of this project, and its kernels need a GPU; (2) the HF <->
Megatron mapping of those layers in convert.py: HF (transformers 5.24 `qwen3_5_moe`)
`linear_attn.{in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d, dt_bias, A_log, norm,
out_proj}` -> GatedDeltaNet `{in_proj (qkv, z, b, a concatenated in megatron's per-head
order), conv1d, dt_bias, A_log, out_norm, out_proj}`, the gated q_proj -> linear_qkv with the
output gate, `mlp.shared_expert` + `shared_expert_gate` -> megatron's shared expert and gate;
(3) an equivalence test against HF Qwen3.5 on a
GPU. Other megatron-core versions (0.19 on Python 3.12) are not installed here and not checked.

Parallelism (trainer.py, dataparallel.py): TP / EP / ETP and data parallelism through
megatron-core's DistributedDataParallel + finalize_model_grads (EP 2 / DP 2 equal world size 1
on the CPU); per-rank checkpoints in t1.ckpt's protocol (checkpoint.py); activation recompute
with the routing replayed in the recompute (replay.to_backward). Pipeline parallelism is
refused: megatron-core 0.16.1's schedules (`get_forward_backward_func`) allocate on device
"cuda", so they do not run on the CPU, and the trainer does not drive them yet.
"""

from t1.train.megatron.runtime import MegatronUnavailable, available

__all__ = ["MegatronUnavailable", "available"]
