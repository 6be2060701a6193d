"""A lean, batch-invariant forward of a Qwen3 MoE for the local engine: plain tensor code.

    lean = LeanQwen3Moe(model)                       # HF Qwen3MoeForCausalLM, any dtype
    cache = RowCache.empty(lean)                     # one request's KV cache (grows by doubling)
    logits, routes = lean.prefill(ids, cache)        # [V] float32, [len(ids), layers, k]
    logits, routes = lean.decode(tokens, caches)     # one step of B rows: [B, V], [B, layers, k]

Why: the HF module tree costs ~11.6 ms per decoded token of the tiny MoE on 2 cores, almost all
of it per-op and per-module overhead; this path reads the same weights (qkv fused, all experts
in one matrix) and runs ~50 tensor ops per layer.

Batch invariance (`run.deterministic`, SGLang's `--enable-deterministic-inference`): a row's
decode arithmetic never depends on which other rows share the step.
* Every decode forward has the same shapes: the rows are cut into tiles of `TILE` rows and a
  short tile is padded with dummy rows, so each matmul is called with M = TILE whatever the
  batch (MKL/oneDNN pick their kernel, and with it the reduction order, by shape: an fp32
  [1, 128] x [128, N] differs from row 0 of a [2+, 128] product in the last bit for most
  outputs; a row's position inside a fixed-shape product does not matter, both measured here).
* Attention is computed per row over that row's own cache (its shapes are the row's alone).
* Expert dispatch does not regroup tokens by expert (HF's loop runs each expert on however many
  tokens chose it, so M varies with the batch): every expert is applied to the whole tile in
  one fixed-shape matmul and each row gathers its top-k outputs, summed in slot order.
* Norms, softmax, top-k and sampling are per row.
`batch_invariant=False` drops the padding (M = live rows): the negative control of the tests.

Prefill runs one request at a time (as in the HF path), so its shapes are the request's own:
experts are dispatched sparsely there (grouped by expert) when the chunk is longer than a tile.
Only plain Qwen3 MoE is supported (`supports`); Qwen3.5 (linear attention) keeps the HF path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TILE = 8  # rows per decode matmul (the engine's default max_batch)


def supports(model) -> bool:
    """True for an HF Qwen3 MoE whose every layer is MoE, without attention biases."""
    cfg = model.config
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    return (
        getattr(cfg, "model_type", "") == "qwen3_moe"
        and not getattr(cfg, "attention_bias", False)
        and not list(getattr(cfg, "mlp_only_layers", None) or [])
        and int(getattr(cfg, "decoder_sparse_step", 1) or 1) == 1
        and not getattr(cfg, "use_sliding_window", False)
        and rope == "default"
    )


class RowCache:
    """One request's KV cache: `kv [layers, 2, kv_heads, capacity, head_dim]`, `length` used.

    float32 whatever the model's dtype: the keys and values are the model dtype's values (bf16
    k/v projections, upcast exactly), attention then runs in fp32 as fused attention kernels
    accumulate (and bf16 batched matmuls of these tiny shapes are ~10x slower on the CPU)."""

    def __init__(self, kv: torch.Tensor, length: int = 0) -> None:
        self.kv = kv
        self.length = length

    @classmethod
    def empty(cls, lean: LeanQwen3Moe, capacity: int = 256) -> RowCache:
        shape = (lean.n_layers, 2, lean.kv_heads, capacity, lean.head_dim)
        return cls(torch.zeros(shape, dtype=torch.float32))

    def reserve(self, n: int) -> None:
        """Make room for `n` positions (capacity doubles; the used part is copied)."""
        cap = self.kv.shape[3]
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        kv = self.kv.new_zeros(*self.kv.shape[:3], cap, self.kv.shape[4])
        kv[:, :, :, : self.length] = self.kv[:, :, :, : self.length]
        self.kv = kv

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """DynamicCache's convention: a negative `max_length` drops that many positions."""
        self.length = self.length + max_length if max_length < 0 else min(self.length, max_length)


class LeanQwen3Moe:
    """The decoder of an HF Qwen3MoeForCausalLM as plain tensor ops (weights shared, not copied,
    except the fused qkv / expert matrices). Rebuild after the model's weights change."""

    def __init__(self, model, batch_invariant: bool = True, tile: int = TILE) -> None:
        cfg = model.config
        self.batch_invariant, self.tile = batch_invariant, tile
        self.n_layers = int(cfg.num_hidden_layers)
        self.heads, self.kv_heads = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.hidden = int(cfg.hidden_size)
        self.eps = float(cfg.rms_norm_eps)
        self.top_k, self.n_experts = int(cfg.num_experts_per_tok), int(cfg.num_experts)
        self.inter = int(cfg.moe_intermediate_size)
        self.norm_topk = bool(cfg.norm_topk_prob)
        self.scale = self.head_dim**-0.5
        inner = model.model
        self.dtype = inner.embed_tokens.weight.dtype
        self.embed = inner.embed_tokens.weight.detach()
        self.final_norm = inner.norm.weight.detach()
        self.lm_head = model.lm_head.weight.detach()
        self.layers = []
        for layer in inner.layers:
            at, mlp = layer.self_attn, layer.mlp
            qk_w = torch.cat(
                [at.q_norm.weight.detach()[None].expand(self.heads, -1)]
                + [at.k_norm.weight.detach()[None].expand(self.kv_heads, -1)]
            )
            gu = mlp.experts.gate_up_proj.detach()  # [E, 2I, H]
            self.layers.append(
                {
                    "ln1": layer.input_layernorm.weight.detach(),
                    "ln2": layer.post_attention_layernorm.weight.detach(),
                    "qkv": torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight])
                    .detach()
                    .contiguous(),
                    "qk_norm": qk_w.contiguous(),
                    "o": at.o_proj.weight.detach(),
                    "router": mlp.gate.weight.detach(),
                    "gate_up": gu,
                    "gate_up_all": gu.reshape(-1, self.hidden),  # [E*2I, H]
                    "down_t": mlp.experts.down_proj.detach().transpose(1, 2).contiguous(),
                    "down_all": mlp.experts.down_proj.detach()
                    .transpose(1, 2)
                    .reshape(-1, self.hidden),
                }
            )
        d = self.head_dim
        inv_freq = model.model.rotary_emb.inv_freq.detach().float()
        pos = torch.arange(int(cfg.max_position_embeddings) + 1, dtype=torch.float)
        freqs = pos[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(self.dtype)
        sin = emb.sin().to(self.dtype)  # rotate_half(x) * sin == x.roll(d/2) * [-sin_lo, sin_hi]
        self.sin = torch.cat([-sin[:, : d // 2], sin[:, d // 2 :]], dim=-1)

    # ------------------------------------------------------------ building blocks

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """HF Qwen3MoeRMSNorm: normalize in fp32, cast back, scale."""
        return w * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(self.dtype)

    def _rope_tables(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin at positions pos [T], shaped [T, 1, D] (once per forward)."""
        return self.cos[pos][:, None], self.sin[pos][:, None]

    def _qkv(self, x: torch.Tensor, lw: dict, rope: tuple[torch.Tensor, torch.Tensor]):
        """Pre-norm and q/k/v of x [T, H]: q [T, Hq, D], k and v [T, Hkv, D] (k, q roped)."""
        h = self._norm(x, lw["ln1"])
        qkv = h @ lw["qkv"].T
        t, d, nqk = x.shape[0], self.head_dim, self.heads + self.kv_heads
        qk = self._norm(qkv[:, : nqk * d].reshape(t, nqk, d), lw["qk_norm"])
        cos, sin = rope
        qk = qk * cos + qk.roll(self.head_dim // 2, dims=-1) * sin
        v = qkv[:, nqk * d :].reshape(t, self.kv_heads, d)
        return qk[:, : self.heads], qk[:, self.heads :], v

    def _route(self, h: torch.Tensor, lw: dict):
        logits = h @ lw["router"].T
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(self.dtype), ids

    def _experts_dense(self, h: torch.Tensor, weights, ids, lw: dict) -> torch.Tensor:
        """Every expert on every row in two fixed-shape matmuls: the rows' routing weights
        (0 for the experts a row did not choose) scale the activations, and one
        [T, E*I] x [E*I, H] product applies every down projection and sums the chosen ones."""
        t, e, i = h.shape[0], self.n_experts, self.inter
        gu = (h @ lw["gate_up_all"].T).view(t, e, 2 * i)
        dense = torch.zeros(t, e, dtype=self.dtype).scatter_(1, ids, weights)  # [T, E]
        act = F.silu(gu[..., :i]) * gu[..., i:] * dense[..., None]  # [T, E, I]
        return act.view(t, e * i) @ lw["down_all"]

    def _experts_sparse(self, h: torch.Tensor, weights, ids, lw: dict) -> torch.Tensor:
        """HF's dispatch: each chosen expert on the tokens that chose it (prefill only)."""
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.n_experts).tolist()
        tokens, w = order // self.top_k, weights.reshape(-1)[order]
        out = torch.zeros(h.shape, dtype=torch.float32)  # bf16 index_add_ is a slow path
        start, i = 0, self.inter
        for e, n in enumerate(counts):
            if n == 0:
                continue
            tok = tokens[start : start + n]
            gu = h.index_select(0, tok) @ lw["gate_up"][e].T
            y = (F.silu(gu[:, :i]) * gu[:, i:]) @ lw["down_t"][e]
            out.index_add_(0, tok, (y * w[start : start + n, None]).float())
            start += n
        return out.to(self.dtype)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return (self._norm(x, self.final_norm) @ self.lm_head.T).float()

    # ------------------------------------------------------------ forwards

    @torch.no_grad()
    def prefill(self, ids: list[int], cache: RowCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Process `ids` after the `cache.length` cached positions of one request.

        Returns the last position's logits [V] (float32) and routing [len(ids), layers, k]."""
        start, t = cache.length, len(ids)
        cache.reserve(start + t + 1)
        pos = torch.arange(start, start + t)
        rope = self._rope_tables(pos)
        x = self.embed[torch.tensor(ids)]
        mask = None
        if start:
            mask = torch.arange(start + t)[None, :] <= pos[:, None]
        routes = []
        for li, lw in enumerate(self.layers):
            q, k, v = self._qkv(x, lw, rope)
            kv = cache.kv[li]
            kv[0, :, start : start + t] = k.transpose(0, 1)
            kv[1, :, start : start + t] = v.transpose(0, 1)
            att = F.scaled_dot_product_attention(  # 4-D: the flash kernel (3-D: the math path)
                q.transpose(0, 1).float()[None],
                kv[0, :, : start + t][None],
                kv[1, :, : start + t][None],
                attn_mask=mask,
                is_causal=mask is None,
                enable_gqa=True,
            )[0]  # [Hq, T, D]
            x = x + att.transpose(0, 1).reshape(t, -1).to(self.dtype) @ lw["o"].T
            h = self._norm(x, lw["ln2"])
            weights, top = self._route(h, lw)
            routes.append(top)
            moe = self._experts_sparse if t > self.tile else self._experts_dense
            x = x + moe(h, weights, top, lw)
        cache.length = start + t
        return self._head(x[-1:])[0], torch.stack(routes, dim=1)

    @torch.no_grad()
    def decode(
        self, tokens: list[int], caches: list[RowCache]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step: row b feeds `tokens[b]` at position `caches[b].length`.

        Returns logits [B, V] (float32) and routing [B, layers, k]; each cache grows by one."""
        if not self.batch_invariant:
            return self._decode_tile(tokens, caches, len(tokens))
        logits, routes = [], []
        for s in range(0, len(tokens), self.tile):
            lg, rt = self._decode_tile(tokens[s : s + self.tile], caches[s : s + self.tile])
            logits.append(lg)
            routes.append(rt)
        if len(logits) == 1:
            return logits[0], routes[0]
        return torch.cat(logits), torch.cat(routes)

    def _decode_tile(
        self, tokens: list[int], caches: list[RowCache], rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b = len(tokens)
        rows = rows or self.tile  # the tile's shape: padded with dummy rows (token 0, position 0)
        pad = rows - b
        lengths = [c.length for c in caches]
        ids = torch.tensor(tokens + [0] * pad)
        rope = self._rope_tables(torch.tensor(lengths + [0] * pad))
        for c in caches:
            c.reserve(c.length + 1)
        x = self.embed[ids]
        routes = []
        for li, lw in enumerate(self.layers):
            q, k, v = self._qkv(x, lw, rope)
            kv_new = torch.stack([k, v], dim=1).float()  # [rows, 2, Hkv, D]
            qg = (q.float() * self.scale).view(rows, self.kv_heads, -1, self.head_dim)
            outs = []
            for r, (c, n) in enumerate(zip(caches, lengths, strict=True)):
                kv = c.kv[li]
                kv[:, :, n] = kv_new[r]
                scores = torch.bmm(qg[r], kv[0, :, : n + 1].transpose(1, 2))  # [Hkv, rep, n+1]
                probs = torch.softmax(scores, dim=-1)
                outs.append(torch.bmm(probs, kv[1, :, : n + 1]))  # [Hkv, rep, D]
            att = torch.stack(outs).view(b, -1).to(self.dtype)  # [B, Hq*D]
            if pad:
                att = torch.cat([att, att.new_zeros(pad, att.shape[1])])
            x = x + att @ lw["o"].T
            h = self._norm(x, lw["ln2"])
            weights, top = self._route(h, lw)
            routes.append(top)
            x = x + self._experts_dense(h, weights, top, lw)
        for c in caches:
            c.length += 1
        return self._head(x)[:b], torch.stack(routes, dim=1)[:b]
