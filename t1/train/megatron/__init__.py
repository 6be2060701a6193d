"""The `megatron` training backend: megatron-core GPTModel actor and critic, built-in router replay.

    train: {backend: megatron}  in the campaign YAML, then  t1 train --config F --stage ppo ...
    pytest tests/megatron -q                                         # CPU equivalence tests

Modules: `runtime` (distributed init, the megatron-core compatibility fix, the CPU check),
`model` (TransformerConfig + GPTModel for the Qwen3-MoE family, the value-head critic),
`convert` (HF <-> Megatron weights, TP/PP/EP/ETP sharding), `replay` (R³ through
`RouterReplay`), `trainer` (`MegatronTrainer`, the `t1.train.protocol.Trainer` of this backend),
`plan` (the memory plan checked before launch; actor/critic offload in turn).

Families. `model.arch: qwen3_moe` (full attention, Qwen3-MoE) is built and proven equal to the
hf backend. `qwen3_5_moe` (Qwen3.5: 3 of every 4 layers Gated DeltaNet linear attention, gated
full attention, a gated shared expert, partial RoPE) is refused: megatron-core 0.16.1 has the
pieces (`experimental_attention_variant="gated_delta_net"` + `linear_attention_freq`,
`attention_output_gate`, `moe_shared_expert_gate`) but its Gated DeltaNet runs only through the
`fla` Triton kernels (GPU) and this package has no HF <-> Megatron mapping for those layers
yet; no layer is faked.
"""

from t1.train.megatron.runtime import MegatronUnavailable, available

__all__ = ["MegatronUnavailable", "available"]
