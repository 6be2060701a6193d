"""The `megatron` training backend: megatron-core GPTModel actor and critic, built-in router replay.

    train: {backend: megatron}  in the campaign YAML, then  t1 train --config F --stage ppo ...
    pytest tests/megatron -q                                         # CPU equivalence tests
    pytest tests/megatron/test_qwen35.py -q                          # Qwen3.5 on the CPU

Modules: `runtime` (distributed init, the megatron-core compatibility fix, the CPU check),
`model` (TransformerConfig + GPTModel for the Qwen3-MoE and Qwen3.5-MoE families, the
value-head critic), `convert` (HF <-> Megatron weights, TP/PP/EP/ETP sharding), `replay` (R³
through `RouterReplay`), `trainer` (`MegatronTrainer`, the `t1.train.protocol.Trainer` of this
backend), `pipeline` (PP > 1: the trainer's forwards and updates through megatron-core's
pipeline schedule), `residency` (actor / critic offload in turn), `vocab_logp` (chunked
vocab-parallel log-probs), `plan` (the memory plan checked before launch),
`dataparallel` (rows per DP rank, gradient reduction, global grad norm), `hf_load` (one
rank's slices read straight from an HF checkpoint's shards), `collect` (a role's whole HF state
on rank 0, for the tests' comparisons), `checkpoint` (one file
per rank in t1.store.ckpt's atomic protocol), `stage` (the PPO stage's directory under torchrun:
per-rank checkpoints, rank 0 writes), `export` (the sharded HF export without a gather;
`stage_tensors`, the weight stream each pipeline stage's leader feeds), `attention` (the core
attention: local or Transformer Engine's), `main_weights` (bf16 with fp32 main weights; Adam
state on the host between steps with train.optimizer_offload), `measure` (per-rank memory of
the real models without a GPU).

Families. `model.arch: qwen3_moe` (full attention, Qwen3-MoE) and `qwen3_5_moe` (Qwen3.5: 3 of
every 4 layers Gated DeltaNet linear attention, gated full attention, a gated shared expert,
partial RoPE, zero-centered RMSNorms) are built from megatron-core 0.16.1's own modules (the
version installed and tested here, Python 3.11; model.py) and mapped both ways, actor and
critic, with the TP / PP / EP / ETP sharding of every tensor (convert.py). No layer is faked:
Qwen3.5's linear-attention layers are megatron-core's `GatedDeltaNet`
(`megatron/core/ssm/gated_delta_net.py`, `experimental_attention_variant="gated_delta_net"` +
`linear_attention_freq`), the gate is `attention_output_gate`, the shared expert's
`moe_shared_expert_gate`, partial RoPE `rotary_percent`; the modules of this package are the
norms `model.ZeroCenteredRMSNorm` (x_hat * (1 + w), what TE's `zero_centered_gamma` computes; the
local torch norm of megatron-core has no zero-centered form) and `model.RMSNorm` (the local torch
norm refuses sequence parallelism).

What is checked on the CPU (tests/megatron/test_qwen35.py, tiny Qwen3.5, fp32): the round trip
HF -> Megatron -> HF is exact (0.0), shard / unshard exact at TP 2, EP 2, PP 2 and
TP 2 + EP 2 + ETP 2 + PP 2, logits and values equal HF's (max error 3e-7 on logits of
magnitude 1, 3e-6 on values of magnitude 10, measured at 1, 2 and 4 GDN chunks of 64
positions: the two torch recurrences agree to fp32 rounding), one PPO actor update's loss and
gradients equal HF's (with and without activation recompute), and R³ replay routes every
recorded token to the recorded experts. There GatedDeltaNet runs megatron-core's pure-torch
path: `deterministic_mode` (model.transformer_config turns it on when CUDA is absent) selects
`torch_chunk_gated_delta_rule` and the torch conv1d.

What is not done or not checked here, and why ((1)-(2) need a GPU):
(1) flash-linear-attention (`fla`) must import for `GatedDeltaNet.__init__` (else model.py
refuses, naming it), and `GatedDeltaNet.forward` always calls fla's `l2norm` on q and k, a
Triton kernel. fla is not a dependency of megatron-core nor of this project. Measured on this
CPU box: pip installs flash-linear-attention 0.6.0 (+ fla-core 0.6.0, einops); without triton
`fla.modules` does not import ("No module named 'triton'"); with triton 3.9.0 it imports
("Triton is not supported on current platform, roll back to CPU"), but `l2norm` on a CPU tensor
raises "0 active drivers", and transformers 5.24 then routes HF Qwen3.5's gated delta rule to
fla too, so the HF model stops running on the CPU (both were uninstalled again). The CPU tests
therefore patch exactly three names of megatron-core's module (tests/megatron/fla_shim.py:
HAVE_FLA, `l2norm` -> its torch formula, fla's chunk kernel -> an error never reached).
(2) On a GPU with fla, deterministic_mode is off by default and the recurrence is fla's
`chunk_gated_delta_rule` kernel: its equality with HF (and HF's own fla path) is not checked
here; pass `deterministic=True` to model.transformer_config for the torch path there.
(3) TP > 1 runs with sequence parallelism (megatron-core requires it for MoE): every norm of
both families is a local module that supports it (model.RMSNorm / ZeroCenteredRMSNorm, weights
marked `sequence_parallel` so their gradients are summed over the TP group); checked at TP 2 +
SP against world size 1 (tests/megatron/test_qwen35_tp_sp.py: logits, log-probs, values,
replayed routes, losses, every gradient).
(4) megatron-core's own Qwen3.5 block helper
(`get_transformer_block_with_experimental_attention_variant_spec`) requires Transformer
Engine; model.qwen35_block_spec builds the same layers from the local (non-TE) spec. A TE
build (fused input norm in GDN's in_proj, TENorm with zero_centered_gamma) is not done.
(5) megatron-core 0.16.1's GatedDeltaNet ignores the attention mask and refuses packed (THD)
sequences and inference contexts: rows must be right-padded, as t1.train.batch.collate does
(padding after a row's tokens cannot reach them; HF likewise only zeroes padded positions).
Other megatron-core versions (0.19 on Python 3.12) are not installed here and not checked.

Parallelism (trainer.py, dataparallel.py): TP / EP / ETP and data parallelism through
megatron-core's DistributedDataParallel + finalize_model_grads (EP 2 / DP 2 equal world size 1
on the CPU); per-rank checkpoints in t1.store.ckpt's protocol (checkpoint.py); activation recompute
with the routing replayed in the recompute (replay.to_backward). Pipeline parallelism
(pipeline.py): megatron-core's own schedule (`get_forward_backward_func`, non-interleaved 1F1B)
drives every forward and update in micro-batches; each stage replays its own layers' records
per micro-batch, the last stage computes log-probs / values and the loss, the results are
broadcast from it over the pipeline group, the routing check combines the stages' per-position
mismatches; an update costs one extra no-grad pipeline forward (the PPO loss is a function of
the whole minibatch: its gradient with respect to the outputs is back-propagated exactly).
Checked on the CPU (tests/megatron/test_megatron_pipeline.py, gloo): PP 2 and TP 2 + SP
trainer steps (log-probs, values, routing check, losses, gradients, a PPO step, per-rank
checkpoint resume) equal world size 1, and so does TP 2 x PP 2 x EP 2 on the tiny Qwen3.5 at
world size 8. megatron-core 0.16.1's schedules allocate one counter on device "cuda" and call
`torch.cuda.synchronize()`; only the tests patch those (tests/megatron/pp_shim.py). Not
checked: interleaved (virtual) pipeline stages (not used), the schedule on GPUs (nccl).
"""

from t1.train.megatron.runtime import MegatronUnavailable, available

__all__ = ["MegatronUnavailable", "available"]
