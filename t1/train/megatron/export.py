"""Sharded HF export of the megatron backend: one tensor in flight per stage, no gather.

    for name, tensor in stage_tensors(trainer, "actor"):   # EVERY rank iterates (collective)
        if tensor is not None: ...                          # this rank leads its pipeline stage
    stats = export_hf(trainer, "actor", "OUT/actor")        # every rank calls it

`stage_tensors(trainer, kind, meter=None)` is THE interface of weight streaming (this HF
export; a distributed weight update to SGLang replicas from each stage's leader, as slime does):
* Collective: every rank iterates it to the end (one that stops early leaves its leader
  waiting). It begins with one `all_gather` of each rank's (tp, pp, ep, etp): 4 ints, no weights.
* Stages work independently: the ranks of stage s walk its megatron tensors in the model's
  state-dict order (a layer's experts at its first expert entry: expert 0..E-1, each
  `linear_fc1` then `linear_fc2`); every rank of the stage yields the same HF names in the same
  order on every call.
* The stage's LEADER is its lowest global rank. Per megatron tensor it `irecv`s the pieces it
  lacks from their sources (`send`): each TP part from the stage's lowest rank of that TP rank,
  an expert's ETP parts from the lowest rank holding that expert (EP rank) and ETP rank; a
  TP-replicated tensor is its own. It joins them (convert.join: rows, cols, GLU halves,
  GatedDeltaNet sections) and converts the whole tensor (convert.tensor_to_hf: vocab padding
  dropped, q/k/v and the Qwen3.5 gate split, GDN in_proj split, one entry per expert).
* Yields `(hf_name, tensor)` on the leader, `(hf_name, None)` on the stage's other ranks.
  Names are those HF checkpoints store (save_pretrained's: `model.layers.L.mlp.experts.E.
  gate_proj.weight`, ...; the critic's `backbone.*`, `value_head.*`). The tensor is on the
  communication device (the GPU under NCCL, the CPU under gloo), read-only (maybe a parameter
  or a view of the joined tensor), never reused: it stays valid while the consumer keeps it.
* Memory: one megatron tensor assembled at a time (received pieces, joined tensor, HF outputs);
  `meter` (a `Meter`) counts those bytes (not the model's own storages) until the next `next()`;
  a consumer that keeps tensors longer counts them itself (`meter.hold` / `drop`, as buckets do).

`export_hf(trainer, kind, out_dir, bucket_bytes)` (every rank): rank 0 makes a temporary
directory beside OUT_DIR. Actor: each leader packs its tensors into buckets of at most
`bucket_bytes` (a larger tensor alone) and writes each as its own safetensors file, fsynced; a
barrier; rank 0 names them `model-KKKKK-of-NNNNN.safetensors` (one file: `model.safetensors`, as
save_pretrained does), checks every name and shape of the HF shell is there exactly once,
writes `model.safetensors.index.json` (weight_map, metadata.total_size), config.json and
generation_config.json as save_pretrained does, fsyncs and swaps the directory into place
(t1.records.replace_dir). Critic (t1.model.policy.Critic's format: ONE critic.safetensors of
the model's state dict, experts stacked, + t1_critic.json): every rank lays the file out from
the shell's names and shapes, rank 0 writes the header and sizes the file, each leader
`os.pwrite`s its tensors' bytes into their places (an expert into its slot of the stacked
tensor; disjoint ranges of one file on the shared filesystem), and the bytes written, summed
over ranks, must cover it exactly. A final broadcast: no rank returns before the directory is
in place, and a problem rank 0 finds raises `ExportError` on every rank (the temporary
directory removed). Returns this rank's `ExportStats` (peak extra bytes, files, bytes).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from t1.model.policy import CRITIC_FILE, CRITIC_META
from t1.model.policy import SCHEMA_VERSION as CRITIC_SCHEMA
from t1.records import write_json_atomic
from t1.train.megatron import convert as C

BUCKET_BYTES = 1 << 30  # 1 GiB per safetensors file
_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
_FC = ("linear_fc1.weight", "linear_fc2.weight")


class ExportError(RuntimeError):
    """The export is incomplete or inconsistent; the message names the directory and problem."""


class Meter:
    """Bytes of the storages the exporter holds beyond the model's own: `now`, `peak`."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._live: dict[int, list[int]] = {}  # storage ptr -> [refs, bytes]
        self._owned: set[int] = set()

    def own(self, tensors) -> None:
        self._owned |= {t.untyped_storage().data_ptr() for t in tensors}

    def hold(self, t: torch.Tensor) -> None:
        key = t.untyped_storage().data_ptr()
        if key in self._owned:
            return
        entry = self._live.setdefault(key, [0, t.untyped_storage().nbytes()])
        if entry[0] == 0:
            self.now += entry[1]
            self.peak = max(self.peak, self.now)
        entry[0] += 1

    def drop(self, t: torch.Tensor) -> None:
        entry = self._live.get(key := t.untyped_storage().data_ptr())
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                self.now -= entry[1]
                del self._live[key]


@dataclass(frozen=True)
class _Unit:
    name: str  # unsharded megatron name (global layer / expert indices)
    local: str  # the same tensor's name in every source's (and the leader's) state dict
    rule: str  # convert.join's layout rule
    sources: tuple[int, ...]  # global rank of each TP / ETP part, in part order


def comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def coordinates(device: torch.device | None = None) -> list[tuple[int, int, int, int]]:
    """(tp, pp, ep, etp) of every global rank (a collective: one all_gather of 4 ints each)."""
    from t1.train.megatron.runtime import ranks

    r = ranks()
    device = device or comm_device()
    mine = torch.tensor([r["tp"], r["pp"], r["ep"], r["etp"]], dtype=torch.long, device=device)
    got = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(got, mine)
    return [tuple(int(x) for x in t.cpu()) for t in got]


def _units(local, kind, config, par, stage: int, src) -> Iterator[_Unit]:
    """Stage `stage`'s megatron tensors in state-dict order (see the module docstring)."""
    per_stage = config.num_hidden_layers // par.pp
    experts = config.num_experts
    per_ep = experts // par.ep
    done: set[int] = set()
    for name in local:
        m = C._LAYER.match(name)
        if m is None:
            critic_head = kind == "critic" and name.startswith("output_layer.")
            rule = "replicated" if critic_head else C._tp_rule(name)
            yield _Unit(name, name, rule, src(rule))
            continue
        layer, rest = int(m.group(1)), m.group(2)
        glob = f"decoder.layers.{stage * per_stage + layer}."
        e = C._EXPERT.match(rest)
        if e is None:
            rule = C._tp_rule(rest)
            yield _Unit(glob + rest, name, rule, src(rule))
            continue
        if e.group(2) not in _FC:
            raise ExportError(f"megatron weights: no export rule for expert tensor {name!r}")
        if layer in done:
            continue
        done.add(layer)
        for g in range(experts):
            for tail in _FC:
                rule = "replicated" if par.etp == 1 else ("glu" if tail == _FC[0] else "cols")
                yield _Unit(
                    f"{glob}mlp.experts.local_experts.{g}.{tail}",
                    f"decoder.layers.{layer}.mlp.experts.local_experts.{g % per_ep}.{tail}",
                    rule,
                    src(rule, ep=g // per_ep),
                )


def stage_tensors(trainer, kind: str, meter: Meter | None = None):
    """Yield (hf_name, tensor | None): see the module docstring (every rank iterates)."""
    model = getattr(trainer, kind)
    if model is None:
        raise ValueError(f"stage_tensors: the trainer has no {kind}")
    config, par = trainer.hf_config, trainer.par
    meter = meter if meter is not None else Meter()
    local = {
        k: v.detach()
        for k, v in model.state_dict().items()
        if not k.endswith("_extra_state") and isinstance(v, torch.Tensor)
    }
    meter.own(local.values())
    dev = comm_device()
    coords = coordinates(dev)
    rank = dist.get_rank()
    stage = coords[rank][1]
    mates = [r for r, c in enumerate(coords) if c[1] == stage]
    leader = mates[0]

    def src(rule: str, ep: int | None = None) -> tuple[int, ...]:
        if ep is None:  # dense: the lowest rank of each TP rank (replicated: the leader's own)
            if rule == "replicated":
                return (leader,)
            return tuple(min(r for r in mates if coords[r][0] == j) for j in range(par.tp))
        n = 1 if rule == "replicated" else par.etp
        return tuple(
            min(r for r in mates if coords[r][2] == ep and coords[r][3] == j) for j in range(n)
        )

    for unit in _units(local, kind, config, par, stage, src):
        mine = local[unit.local]
        secs = None
        if unit.rule.startswith("gdn_"):  # every part has the sections of this rank's part
            secs = C._gdn_sections(unit.rule, local.__getitem__, unit.local)
        if rank == leader:
            yield from _lead(unit, mine, secs, rank, dev, meter, config, kind)
            continue
        if rank in unit.sources:
            t = mine if mine.device == dev and mine.is_contiguous() else mine.to(dev).contiguous()
            meter.hold(t)
            dist.send(t, dst=leader)
            meter.drop(t)
        meta = C.join([mine.to("meta")] * len(unit.sources), unit.rule, secs)  # names only
        for name, _ in C.tensor_to_hf(unit.name, meta, config, kind):
            yield name, None


def _lead(unit: _Unit, mine, secs, rank: int, dev, meter: Meter, config, kind: str):
    """The leader's half of one unit: receive the pieces, join, convert, yield."""
    parts, bufs, reqs = [], [], []
    for r in unit.sources:
        if r == rank:  # its own piece (copied only when the role is offloaded to the CPU)
            own = mine.to(dev)
            meter.hold(own)
            bufs.append(own)
            parts.append(own)
            continue
        buf = torch.empty(mine.shape, dtype=mine.dtype, device=dev)
        meter.hold(buf)
        bufs.append(buf)
        reqs.append(dist.irecv(buf, src=r))
        parts.append(buf)
    for q in reqs:
        q.wait()
    full = C.join(parts, unit.rule, secs)
    meter.hold(full)
    del parts
    for b in bufs:
        meter.drop(b)
    del bufs
    outs = [(n, t.contiguous()) for n, t in C.tensor_to_hf(unit.name, full, config, kind)]
    for _, t in outs:
        meter.hold(t)
    try:
        for name, t in outs:
            yield name, t
    finally:
        for _, t in outs:
            meter.drop(t)
        meter.drop(full)


# ---------------------------------------------------------------- the HF directory


@dataclass
class ExportStats:
    """One rank's figures of one export."""

    peak_bytes: int = 0  # the exporter's peak extra memory on this rank (Meter.peak)
    files: list[str] = field(default_factory=list)  # files this rank wrote (their first names)
    bytes_written: int = 0  # tensor bytes this rank wrote, in `tensors` tensors
    tensors: int = 0
    largest_bytes: int = 0  # its largest single tensor

    def add(self, t: torch.Tensor) -> None:
        self.bytes_written, self.tensors = self.bytes_written + t.nbytes, self.tensors + 1
        self.largest_bytes = max(self.largest_bytes, t.nbytes)


def export_hf(trainer, kind: str, out_dir, bucket_bytes: int = BUCKET_BYTES) -> ExportStats:
    """Write the role as an HF directory at OUT_DIR (see the module docstring; every rank)."""
    out = Path(out_dir)
    rank = dist.get_rank()
    box = [None]
    if rank == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        box = [tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent)]
    dist.broadcast_object_list(box, src=0)
    tmp = Path(box[0])
    stats, meter = ExportStats(), Meter()
    shell = trainer.hf_actor if kind == "actor" else trainer.hf_critic
    if kind == "actor":
        _write_buckets(trainer, tmp, bucket_bytes, meter, stats)
        dist.barrier()  # every writer's files are complete and fsynced
        err = _sealed(_seal_actor, tmp, out, shell) if rank == 0 else None
    else:
        layout, data_bytes = _critic_layout(shell)
        if rank == 0:
            _critic_header(tmp / CRITIC_FILE, layout, data_bytes)
        dist.barrier()
        _write_critic(trainer, tmp, layout, meter, stats)
        total = torch.tensor([stats.bytes_written], dtype=torch.long, device=comm_device())
        dist.all_reduce(total)
        err = None
        if rank == 0:
            err = _sealed(_seal_critic, tmp, out, shell, int(total.item()), data_bytes)
    stats.peak_bytes = meter.peak
    box = [err]
    dist.broadcast_object_list(box, src=0)  # no rank returns before the directory is in place
    if box[0] is not None:
        raise ExportError(box[0])
    return stats


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _for_disk(t: torch.Tensor, meter: Meter) -> torch.Tensor:
    """A CPU tensor owning exactly its bytes (a view of a larger storage is copied)."""
    t = t.detach().to("cpu")
    if not t.is_contiguous() or t.untyped_storage().nbytes() != t.nbytes:
        t = t.contiguous().clone()
    meter.hold(t)
    return t


def _write_buckets(trainer, tmp: Path, bucket_bytes: int, meter: Meter, st: ExportStats) -> None:
    from safetensors.torch import save_file

    rank = dist.get_rank()
    bucket: dict[str, torch.Tensor] = {}
    size = 0

    def flush() -> None:
        nonlocal size
        path = tmp / f".part-r{rank:05d}-{len(st.files):05d}.safetensors"
        save_file(bucket, str(path), metadata={"format": "pt"})
        _fsync(path)
        st.files.append(path.name)
        for t in bucket.values():
            meter.drop(t)
        bucket.clear()
        size = 0

    for name, t in stage_tensors(trainer, "actor", meter):
        if t is None:
            continue
        if bucket and size + t.nbytes > bucket_bytes:
            flush()
        bucket[name] = _for_disk(t, meter)
        size += t.nbytes
        st.add(t)
    if bucket:
        flush()


def read_header(path: Path) -> dict:
    """A safetensors file's JSON header (names, dtypes, shapes, offsets; no data read)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def expected_names(shell: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Checkpoint names -> shapes of an HF model (the shell's stacked experts, one per expert)."""
    out: dict[str, tuple[int, ...]] = {}
    for k, v in shell.state_dict().items():
        shape = tuple(v.shape)
        base, _, last = k.rpartition(".")
        if base.endswith(".mlp.experts") and last == "gate_up_proj":
            half = (shape[1] // 2, *shape[2:])
            for e in range(shape[0]):
                out[f"{base}.{e}.gate_proj.weight"] = out[f"{base}.{e}.up_proj.weight"] = half
        elif base.endswith(".mlp.experts") and last == "down_proj":
            for e in range(shape[0]):
                out[f"{base}.{e}.down_proj.weight"] = shape[1:]
        else:
            out[k] = shape
    return out


def _sealed(seal, tmp: Path, out: Path, *args) -> str | None:
    """Rank 0: run `seal`; on any problem the temporary directory goes and the message (naming
    OUT) comes back for every rank."""
    try:
        err = seal(tmp, out, *args)
    except BaseException as e:  # noqa: BLE001 - reported on every rank
        err = f"{out}: {type(e).__name__}: {e}"
    if err is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return err


def _seal_actor(tmp: Path, out: Path, shell) -> str | None:
    """Final file names, the index check, config files, the swap; an error message or None."""
    parts = sorted(tmp.glob(".part-r*.safetensors"))
    n = len(parts)
    weight_map: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    total = 0
    for k, f in enumerate(parts):
        name = "model.safetensors" if n == 1 else f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        for key, h in read_header(f).items():
            if key == "__metadata__":
                continue
            if key in weight_map:
                return f"{out}: {key} written twice ({weight_map[key]} and {name})"
            weight_map[key], shapes[key] = name, tuple(h["shape"])
            total += h["data_offsets"][1] - h["data_offsets"][0]
        f.rename(tmp / name)
    want = expected_names(shell)
    missing, extra = sorted(set(want) - set(shapes)), sorted(set(shapes) - set(want))
    wrong = sorted(k for k in set(want) & set(shapes) if want[k] != shapes[k])
    if missing or extra or wrong:
        return (
            f"{out}: export incomplete: {len(missing)} tensors missing {missing[:4]}, "
            f"{len(extra)} unexpected {extra[:4]}, {len(wrong)} of another shape {wrong[:4]}"
        )
    if n > 1:  # HF's index format: no schema_version / status keys of ours
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        path = tmp / "model.safetensors.index.json"
        write_json_atomic(path, index, indent=2, schema_version=None, status=None)
    config = shell.config  # as PreTrainedModel.save_pretrained writes it
    config.dtype = str(shell.dtype).split(".")[1]
    config.architectures = [type(shell).__name__]
    config.save_pretrained(tmp)
    if shell.can_generate():
        shell.generation_config.save_pretrained(tmp)
    _swap(tmp, out)
    return None


def _swap(tmp: Path, out: Path) -> None:
    from t1.records import replace_dir

    for f in tmp.iterdir():
        _fsync(f)
    replace_dir(tmp, out)


# ---------------------------------------------------------------- the critic: one file


def _critic_layout(shell) -> tuple[dict[str, tuple[torch.dtype, tuple[int, ...], int]], int]:
    """name -> (dtype, shape, byte offset in the data section), sorted by name; data bytes."""
    layout, off = {}, 0
    for k, v in sorted(shell.state_dict().items()):
        layout[k] = (v.dtype, tuple(v.shape), off)
        off += v.numel() * v.element_size()
    return layout, off


def _critic_header(path: Path, layout, data_bytes: int) -> None:
    head: dict = {"__metadata__": {"format": "pt"}}
    for k, (dtype, shape, off) in layout.items():
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        head[k] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [off, off + n]}
    raw = json.dumps(head, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + data_bytes)


def _write_critic(trainer, tmp: Path, layout, meter: Meter, st: ExportStats) -> None:
    path = tmp / CRITIC_FILE
    fd = None
    try:
        for name, t in stage_tensors(trainer, "critic", meter):
            if t is None:
                continue
            if fd is None:
                fd = os.open(path, os.O_RDWR)
                start = 8 + int.from_bytes(os.pread(fd, 8, 0), "little")
            slot = C.expert_slot(name, t.numel())
            key, elem = slot if slot is not None else (name, 0)
            if key not in layout:
                raise ExportError(f"{path}: {name} has no place in the critic's state dict")
            dtype, shape, off = layout[key]
            if t.dtype != dtype or (slot is None and tuple(t.shape) != shape):
                raise ExportError(
                    f"{path}: {name} is {t.dtype} {tuple(t.shape)}, want {dtype} {shape}"
                )
            host = _for_disk(t, meter)
            view = memoryview(host.view(torch.uint8).numpy() if host.numel() else b"")
            at = start + off + elem * host.element_size()
            while len(view):  # a pwrite may write less than asked (~2 GiB at most on Linux)
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
            meter.drop(host)
            st.add(t)
        if fd is not None:
            os.fsync(fd)
            st.files.append(path.name)
    finally:
        if fd is not None:
            os.close(fd)


def _seal_critic(tmp: Path, out: Path, shell, written: int, data_bytes: int) -> str | None:
    if written != data_bytes:
        return (
            f"{out}: export incomplete: {written} tensor bytes written, the critic has {data_bytes}"
        )
    shell.config.save_pretrained(tmp)
    meta = {"schema_version": CRITIC_SCHEMA, "status": "complete", "kind": "critic"}
    (tmp / CRITIC_META).write_text(json.dumps(meta))
    _swap(tmp, out)
    return None
