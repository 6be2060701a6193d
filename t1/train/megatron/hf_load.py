"""One rank's megatron-core weights read straight from an HF checkpoint's safetensors shards.

    from t1.train.megatron.hf_load import load_rank, load_into
    local, stats = load_rank(DIR, hf_config, "actor", Sizes(tp=2, ep=16), Ranks(tp=1, ep=3))
    load_into(gpt_model, DIR, hf_config, "actor", sizes, ranks)     # + convert.load_local

`load_rank` gives exactly `convert.shard(convert.hf_to_mcore(whole_state, ...), sizes, ranks)`
(the same names, shapes, values and dtypes; tests/megatron/test_hf_load.py compares every rank
of TP / EP / ETP / PP layouts at world size 2 and 4) without ever holding the whole model: it
plans, per Megatron tensor of the rank, which rows / columns / experts of which HF tensors it
needs, reads only those with safetensors `safe_open(...).get_slice(name)[...]`, one shard file
at a time (the file is unmapped before the next is opened), copies each slice into memory of
its own, and assembles a Megatron tensor as soon as its pieces are in (then drops them). So a
rank's peak host memory is about its own share of the weights: the rank's experts (EP / ETP),
its TP part of the dense tensors and of the vocabulary, and its pipeline stage's layers.

Checkpoint layouts read: `model.safetensors.index.json` + shards (what `save_pretrained(
max_shard_size=...)` writes) or one `model.safetensors` / `critic.safetensors`; names under
`model.` (Qwen3_5MoeForCausalLM, Qwen3MoeForCausalLM), `model.language_model.` (the released
multimodal Qwen3.5 checkpoints; the vision tower and MTP tensors are never read) or `backbone.`
(a t1 critic directory, t1.model.policy.Critic); experts per expert
(`mlp.experts.E.{gate,up,down}_proj.weight`, as HF checkpoints ship them and transformers 5
saves them) or fused (`mlp.experts.gate_up_proj` [E, 2F, H], `down_proj` [E, H, F], the
in-memory layout). A critic's value head comes from a critic directory or `value_head`.

`stats` (LoadStats) has the bytes read, the bytes of the result, the files opened and the peak
host memory of the load: VmHWM of /proc/self/status, reset before the load where Linux allows
(/proc/self/clear_refs), minus the resident memory before it; `resource.getrusage`'s ru_maxrss
(process lifetime peak) as well. `load_rank` logs them in one line per rank.
"""

from __future__ import annotations

import json
import resource
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from t1.train.megatron import convert as C

ReadKey = tuple[str, tuple[tuple[int, int], ...]]  # (HF name, (start, stop) per leading dim)


@dataclass
class LoadStats:
    bytes_read: int = 0  # of the slices read from the shard files
    bytes_out: int = 0  # of the rank's state
    checkpoint_bytes: int = 0  # of every tensor in the checkpoint's files
    files_opened: int = 0
    tensors_read: int = 0
    peak_rss_delta: int = -1  # VmHWM during the load - VmRSS before it (-1: not measurable)
    ru_maxrss: int = 0  # bytes: the process's lifetime peak (not reset)
    seconds: float = 0.0

    def line(self, where: str) -> str:
        mib = 1 << 20
        return (
            f"t1 hf_load {where}: read {self.bytes_read / mib:.1f} MiB "
            f"({self.tensors_read} slices, {self.files_opened} files) of "
            f"{self.checkpoint_bytes / mib:.1f} MiB, state {self.bytes_out / mib:.1f} MiB, "
            f"peak host memory +{self.peak_rss_delta / mib:.1f} MiB (VmHWM), "
            f"ru_maxrss {self.ru_maxrss / mib:.1f} MiB, {self.seconds:.1f} s"
        )


# ---------------------------------------------------------------- the checkpoint's index


def _header(path: Path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        head = json.loads(f.read(n))
    head.pop("__metadata__", None)
    return head


class Checkpoint:
    """Names, shapes and files of an HF safetensors directory (headers only; nothing loaded)."""

    def __init__(self, directory: str | Path) -> None:
        d = Path(directory)
        index = d / "model.safetensors.index.json"
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = [f for f in ("model.safetensors", "critic.safetensors") if (d / f).exists()]
        if not files:
            raise FileNotFoundError(
                f"{d}: no model.safetensors.index.json, model.safetensors or critic.safetensors"
            )
        self.dir = d
        self.file: dict[str, Path] = {}
        self.shape: dict[str, tuple[int, ...]] = {}
        self.total_bytes = 0
        for f in files:
            for name, meta in _header(d / f).items():
                self.file[name] = d / f
                self.shape[name] = tuple(meta["shape"])
                self.total_bytes += meta["data_offsets"][1] - meta["data_offsets"][0]
        if any(k.startswith("model.language_model.") for k in self.file):
            self.prefix = "model.language_model."
        elif any(k.startswith("backbone.") for k in self.file):
            self.prefix = "backbone."
        else:
            self.prefix = "model."

    def __contains__(self, name: str) -> bool:
        return name in self.file

    def need(self, name: str) -> str:
        if name not in self.file:
            raise KeyError(f"{self.dir}: no tensor {name!r} in the checkpoint")
        return name


# ---------------------------------------------------------------- the plan of one rank


def _chunk(n: int, parts: int, rank: int, what: str) -> tuple[int, int]:
    if n % parts:
        raise ValueError(f"cannot split {what} ({n}) in {parts}")
    return rank * n // parts, (rank + 1) * n // parts


@dataclass
class _Recipe:
    name: str
    keys: list[ReadKey]
    fn: Callable[[list[torch.Tensor]], torch.Tensor]


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _one(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0]


class _Planner:
    def __init__(self, ck: Checkpoint, config, kind: str, sizes: C.Sizes, ranks: C.Ranks):
        self.ck, self.c, self.kind, self.s, self.r = ck, config, kind, sizes, ranks
        self.recipes: list[_Recipe] = []

    def key(self, name: str, *ranges: tuple[int, int]) -> ReadKey:
        return (self.ck.need(name), tuple(ranges))

    def add(self, out: str, keys: list[ReadKey], fn=_cat) -> None:
        self.recipes.append(_Recipe(out, keys, fn))

    def whole(self, out: str, name: str) -> None:
        self.add(out, [self.key(name)], _one)

    def rows(self, out: str, name: str, parts: int, rank: int) -> None:
        n = self.ck.shape[self.ck.need(name)][0]
        self.add(out, [self.key(name, _chunk(n, parts, rank, name))], _one)

    def cols(self, out: str, name: str, parts: int, rank: int) -> None:
        rows, n = self.ck.shape[self.ck.need(name)][:2]
        self.add(out, [self.key(name, (0, rows), _chunk(n, parts, rank, name))], _one)

    # ------------------------------------------------------------ pieces of the model

    def vocab(self, out: str, name: str) -> None:
        """embed_tokens / lm_head: rows padded to a multiple of TP, this TP rank's rows."""
        v, h = self.ck.shape[self.ck.need(name)]
        per = -(-v // self.s.tp)
        a, b = self.r.tp * per, (self.r.tp + 1) * per
        if a >= v:  # only padding
            self.add(out, [], lambda _p, n=b - a: torch.zeros(n, h, dtype=self._dtype(name)))
            return
        pad = b - min(b, v)
        key = self.key(name, (a, min(b, v)))
        if not pad:
            self.add(out, [key], _one)
        else:
            self.add(out, [key], lambda p, n=pad: torch.cat([p[0], p[0].new_zeros(n, h)]))

    def _dtype(self, name: str) -> torch.dtype:
        from safetensors import safe_open

        with safe_open(str(self.ck.file[name]), "pt") as f:
            return f.get_slice(name)[0:1].dtype

    def plan(self, value_head: dict[str, torch.Tensor] | None) -> None:
        c, s, r, ck = self.c, self.s, self.r, self.ck
        p = ck.prefix
        layers = c.num_hidden_layers
        per_stage = layers // s.pp
        if r.pp == 0:
            self.vocab("embedding.word_embeddings.weight", p + "embed_tokens.weight")
        for local in range(per_stage):
            self.layer(r.pp * per_stage + local, local)
        if r.pp == s.pp - 1:
            self.whole("decoder.final_layernorm.weight", p + "norm.weight")
            if self.kind == "actor":
                head = "lm_head.weight" if "lm_head.weight" in ck else p + "embed_tokens.weight"
                self.vocab("output_layer.weight", head)
            elif "value_head.weight" in ck:
                self.whole("output_layer.weight", "value_head.weight")
                self.whole("output_layer.bias", "value_head.bias")
            elif value_head is not None:
                self.add("output_layer.weight", [], lambda _p: value_head["weight"])
                self.add("output_layer.bias", [], lambda _p: value_head["bias"])
            else:
                raise ValueError(
                    f"{ck.dir}: a critic from an LM checkpoint needs value_head (its tensors)"
                )

    def layer(self, layer: int, local: int) -> None:
        c, s, r, ck = self.c, self.s, self.r, self.ck
        h, m = f"{ck.prefix}layers.{layer}.", f"decoder.layers.{local}."
        a = m + f"{C.ATTN}."
        if C._is_qwen35(c) and c.layer_types[layer] == "linear_attention":
            self.gdn(h + "linear_attn.", a)
        else:
            self.attention(h + "self_attn.", a)
        self.whole(m + "input_layernorm.weight", h + "input_layernorm.weight")
        self.whole(m + "pre_mlp_layernorm.weight", h + "post_attention_layernorm.weight")
        self.whole(m + "mlp.router.weight", h + "mlp.gate.weight")
        per_ep = c.num_experts // s.ep
        for j in range(per_ep):
            self.expert(h + "mlp.experts.", r.ep * per_ep + j, f"{m}mlp.experts.local_experts.{j}.")
        if C._is_qwen35(c):
            se, ms = h + "mlp.shared_expert.", m + "mlp.shared_experts."
            f = ck.shape[ck.need(se + "gate_proj.weight")][0]
            rg = _chunk(f, s.tp, r.tp, se + "gate_proj.weight")
            self.add(
                ms + "linear_fc1.weight",
                [self.key(se + "gate_proj.weight", rg), self.key(se + "up_proj.weight", rg)],
            )
            self.cols(ms + "linear_fc2.weight", se + "down_proj.weight", s.tp, r.tp)
            self.whole(ms + "gate_weight", h + "mlp.shared_expert_gate.weight")

    def gdn(self, la: str, a: str) -> None:
        """in_proj = this rank's part of each section q, k, v (of in_proj_qkv), z, b, a; conv1d
        of q, k, v; dt_bias / A_log rows; out_proj columns; the norm whole."""
        s, r = self.s, self.r
        qk2v, v, nv = C._gdn_dims(self.c)
        qk = (qk2v - v) // 2
        qkv, conv = la + "in_proj_qkv.weight", la + "conv1d.weight"

        def sections(name: str, starts_sizes: list[tuple[int, int]]) -> list[ReadKey]:
            keys = []
            for start, size in starts_sizes:
                x, y = _chunk(size, s.tp, r.tp, name)
                keys.append(self.key(name, (start + x, start + y)))
            return keys

        qkv_secs = [(0, qk), (qk, qk), (2 * qk, v)]
        keys = sections(qkv, qkv_secs)
        for x, n in (("z", v), ("b", nv), ("a", nv)):
            keys += sections(la + f"in_proj_{x}.weight", [(0, n)])
        self.add(a + "in_proj.weight", keys)
        self.add(a + "conv1d.weight", sections(conv, qkv_secs))
        self.rows(a + "dt_bias", la + "dt_bias", s.tp, r.tp)
        self.rows(a + "A_log", la + "A_log", s.tp, r.tp)
        self.whole(a + "out_norm.weight", la + "norm.weight")
        self.cols(a + "out_proj.weight", la + "out_proj.weight", s.tp, r.tp)

    def attention(self, sa: str, a: str) -> None:
        """linear_qkv: this rank's query groups (whole groups when TP divides them), each its
        query (+ gate) heads, then its key head and value head (convert.hf_to_mcore's order)."""
        c, s, r = self.c, self.s, self.r
        n, g, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q35 = C._is_qwen35(c)
        names = [sa + x for x in ("q_proj.weight", "k_proj.weight", "v_proj.weight")]
        if g % s.tp == 0:
            g0, g1 = _chunk(g, s.tp, r.tp, "query groups")
            qrows = 2 * d * (n // g) if q35 else d * (n // g)
            keys = [
                self.key(names[0], (g0 * qrows, g1 * qrows)),
                self.key(names[1], (g0 * d, g1 * d)),
                self.key(names[2], (g0 * d, g1 * d)),
            ]
            groups = g1 - g0
        else:  # groups split across ranks (megatron-core refuses it; convert splits rows)
            keys, groups = [self.key(x) for x in names], g

        def fn(p, groups=groups, whole=g % s.tp != 0):
            k = p[1].reshape(groups, 1, d, -1)
            v = p[2].reshape(groups, 1, d, -1)
            if q35:
                qg = p[0].reshape(groups * (n // g), 2, d, -1)
                parts = [qg[:, 0].reshape(groups, n // g, d, -1)]
                parts.append(qg[:, 1].reshape(groups, n // g, d, -1))
            else:
                parts = [p[0].reshape(groups, n // g, d, -1)]
            w = torch.cat([*parts, k, v], 1).flatten(0, 2)
            return C._split(w, s.tp, r.tp, 0) if whole else w

        self.add(a + "linear_qkv.weight", keys, fn)
        self.cols(a + "linear_proj.weight", sa + "o_proj.weight", s.tp, r.tp)
        self.whole(a + "q_layernorm.weight", sa + "q_norm.weight")
        self.whole(a + "k_layernorm.weight", sa + "k_norm.weight")

    def expert(self, ex: str, e: int, out: str) -> None:
        """linear_fc1 = gate rows then up rows (each this ETP rank's part), linear_fc2 = down
        columns; per-expert or fused HF tensors."""
        s, r, ck = self.s, self.r, self.ck
        if f"{ex}{e}.gate_proj.weight" in ck:
            gate, up, down = (f"{ex}{e}.{x}_proj.weight" for x in ("gate", "up", "down"))
            f = ck.shape[gate][0]
            rg = _chunk(f, s.etp, r.etp, gate)
            self.add(out + "linear_fc1.weight", [self.key(gate, rg), self.key(up, rg)])
            self.cols(out + "linear_fc2.weight", down, s.etp, r.etp)
            return
        gu, down = ex + "gate_up_proj", ex + "down_proj"
        _, f2, h = ck.shape[ck.need(gu)]
        x, y = _chunk(f2 // 2, s.etp, r.etp, gu)
        ee = (e, e + 1)
        self.add(
            out + "linear_fc1.weight",
            [self.key(gu, ee, (x, y)), self.key(gu, ee, (f2 // 2 + x, f2 // 2 + y))],
            lambda p: torch.cat([p[0][0], p[1][0]]),
        )
        _, hh, f = ck.shape[ck.need(down)]
        self.add(
            out + "linear_fc2.weight",
            [self.key(down, ee, (0, hh), _chunk(f, s.etp, r.etp, down))],
            lambda p: p[0][0],
        )


# ---------------------------------------------------------------- reading


def _rss() -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes from /proc/self/status; (-1, -1) elsewhere."""
    try:
        vals = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":", 1)
                vals[k] = int(v.split()[0]) * 1024
        return vals["VmRSS"], vals["VmHWM"]
    except (OSError, KeyError, ValueError):
        return -1, -1


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def load_rank(
    directory: str | Path,
    config,
    kind: str,
    sizes: C.Sizes,
    ranks: C.Ranks,
    *,
    dtype: torch.dtype | None = None,
    value_head: dict[str, torch.Tensor] | None = None,
    log: Callable[[str], None] | None = print,
) -> tuple[dict[str, torch.Tensor], LoadStats]:
    """This rank's Megatron state (convert.shard's local names) from DIR's shards, reading
    only its slices; `dtype` casts (None keeps the checkpoint's). See the module docstring."""
    C._prefix(kind)
    t0 = time.perf_counter()
    reset = _reset_peak()
    rss0, _ = _rss()
    ck = Checkpoint(directory)
    planner = _Planner(ck, config, kind, sizes, ranks)
    planner.plan(value_head)
    stats = LoadStats(checkpoint_bytes=ck.total_bytes)
    out = _execute(ck, planner.recipes, dtype, stats)
    if dtype is not None:
        out = {k: v.to(dtype) for k, v in out.items()}
    stats.bytes_out = sum(v.numel() * v.element_size() for v in out.values())
    _, hwm = _rss()
    stats.peak_rss_delta = hwm - rss0 if (reset and rss0 >= 0) else -1
    stats.ru_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stats.seconds = time.perf_counter() - t0
    if log is not None:
        where = f"{kind} tp={ranks.tp}/{sizes.tp} pp={ranks.pp}/{sizes.pp} "
        where += f"ep={ranks.ep}/{sizes.ep} etp={ranks.etp}/{sizes.etp}"
        log(stats.line(where))
    return out, stats


def _execute(
    ck: Checkpoint, recipes: list[_Recipe], dtype: torch.dtype | None, stats: LoadStats
) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    uses: dict[ReadKey, int] = {}
    by_file: dict[Path, list[ReadKey]] = {}
    for rec in recipes:
        for k in rec.keys:
            if k not in uses:
                by_file.setdefault(ck.file[k[0]], []).append(k)
            uses[k] = uses.get(k, 0) + 1
    pieces: dict[ReadKey, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    pending = list(recipes)

    def assemble() -> None:
        nonlocal pending
        still = []
        for rec in pending:
            if not all(k in pieces for k in rec.keys):
                still.append(rec)
                continue
            w = rec.fn([pieces[k] for k in rec.keys])
            out[rec.name] = w.contiguous()
            for k in rec.keys:
                uses[k] -= 1
                if not uses[k]:
                    del pieces[k]
        pending = still

    assemble()  # recipes without reads (padding-only rows, a given value head)
    for path in sorted(by_file):
        stats.files_opened += 1
        with safe_open(str(path), "pt") as f:
            for name, ranges in by_file[path]:
                if ranges:
                    view = f.get_slice(name)[tuple(slice(a, b) for a, b in ranges)]
                else:
                    view = f.get_tensor(name)
                t = torch.empty(view.shape, dtype=view.dtype if dtype is None else dtype)
                t.copy_(view)  # our own memory: the file is unmapped when it closes
                del view
                pieces[(name, ranges)] = t
                stats.tensors_read += 1
                stats.bytes_read += t.numel() * t.element_size()
        assemble()
    if pending:
        raise RuntimeError(f"hf_load: unassembled {[r.name for r in pending][:5]}")
    return {rec.name: out[rec.name] for rec in recipes}


def load_into(
    model: torch.nn.Module,
    directory: str | Path,
    config,
    kind: str,
    sizes: C.Sizes,
    ranks: C.Ranks,
    **kw,
) -> LoadStats:
    """`load_rank` into a megatron-core GPTModel built for this layout (convert.load_local:
    refuses a missing, unexpected or misshapen tensor); the model's dtype is kept."""
    dtype = next(model.parameters()).dtype
    local, stats = load_rank(directory, config, kind, sizes, ranks, dtype=dtype, **kw)
    C.load_local(model, local)
    return stats


def this_rank(par) -> tuple[C.Sizes, C.Ranks]:
    """(Sizes, Ranks) of this process under megatron-core's groups (runtime.setup(par))."""
    from t1.train.megatron.runtime import ranks

    r = ranks()
    return C.Sizes(par.tp, par.pp, par.ep, par.etp), C.Ranks(r["tp"], r["pp"], r["ep"], r["etp"])
