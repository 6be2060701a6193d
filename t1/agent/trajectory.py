"""The Trajectory record: one rollout of one task, as the sampler saw it, on disk.

    pytest tests/test_trajectory.py

    traj = Trajectory(task_id="hello", status=Status.COMPLETED, turns=[Turn(...), ...])
    save_trajectory(traj, "out/rollout/hello-0")     # a directory, written atomically
    traj = load_trajectory("out/rollout/hello-0")    # validates schema_version and shapes

A turn is one engine call: the prompt ids the engine consumed, the ids it sampled (the stop
token included), their logprobs, the routing it captured (t1.engine.base conventions), and
what our loop appended after the sampled ids to build the next prompt (glue + observation +
glue: t1.agent.chat.observation_ids). TITO (t1.tito) turns the turns into training streams.

On disk, a directory:
  trajectory.jsonl   line 1: header (schema_version, task_id, status, reason, reward,
                     assertions, metadata, sidecar dtypes and shapes); then one line per turn
                     (lengths, routing_start, observation, finish_reason)
  tokens.npy         int32 [N]: per turn, the prompt ids not shared with the previous turn's
                     prompt + sampled + appended ids, then sampled ids, then appended ids
                     (so a 300-turn trajectory does not store 300 copies of its prefix)
  logprobs.npy       float32 [sum of sampled]
  engine_ids.npy     int32 [sum of engine ids]: each turn's output ids exactly as the engine
                     returned them (absent for records without them). Nothing downstream
                     writes them; TITO's drift check compares the loss ids against them.
  routing.npy        uint8 | uint16 [sum of routing rows, layers, k] (absent if no capture):
                     the routing record format of t1/model/routing.py, per turn
The directory is written under a temporary name and renamed into place; a half-written
trajectory is never visible under its final name.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from t1.records import replace_dir

SCHEMA_VERSION = 2  # 2: engine_ids (version 1 records still load, without them)
READABLE_VERSIONS = (1, 2)
KIND = "t1.agent.trajectory"
HEADER_FILE = "trajectory.jsonl"


class Status(enum.StrEnum):
    """How a rollout ended. Only COMPLETED and TRUNCATED trajectories are trained on.

    COMPLETED  the agent stopped by itself (a final answer without a tool call); the verifier
               ran and the reward is attached.
    TRUNCATED  the agent was stopped by a budget (max turns, context tokens, wall time, or a
               turn cut at max tokens with no room left); the verifier still ran on the
               sandbox as the agent left it and the reward is attached.
    ABORTED    the record cannot be trained on because of OUR side: cancelled by
               over-sampling, a missing routing capture, lengths that disagree, a TITO
               error. The reason says which; no reward is attached.
    FAILED     the rollout broke in the environment: the sandbox would not start, the
               verifier crashed or timed out, the engine errored. No reward is attached.
    """

    COMPLETED = "COMPLETED"
    TRUNCATED = "TRUNCATED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


class TrajectoryError(ValueError):
    """A trajectory record is malformed; the message names the file and the problem."""


def _ids(x: Any) -> np.ndarray:
    return np.asarray(x if x is not None else [], dtype=np.int32).reshape(-1)


@dataclass
class Turn:
    """One engine call. Arrays are numpy; lists are accepted and converted.

    prompt_ids     int32 [n]        ids the engine consumed (the whole prompt, not a suffix)
    sampled_ids    int32 [g]        ids it sampled, the stop token included
    logprobs       float32 [g]      logprob of each sampled id
    routing        uint8|uint16 [r, layers, k] | None   rows for positions routing_start ..
                                    routing_start + r - 1 of prompt + sampled (at most
                                    n + g - 1: the last sampled id is never fed back)
    routing_start  int              first position with a routing row
    appended_ids   int32 [a]        ids our loop appended after sampled_ids for the next
                                    prompt (empty on the last turn)
    engine_ids     int32 [g] | None the engine's raw output ids as it returned them (the
                                    reference of TITO's drift check; None = not recorded)
    observation    str              the (capped) tool output shown to the model
    finish_reason  str              stop | length | abort (the engine's)
    """

    prompt_ids: np.ndarray
    sampled_ids: np.ndarray
    logprobs: np.ndarray
    routing: np.ndarray | None = None
    routing_start: int = 0
    appended_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    observation: str = ""
    finish_reason: str = "stop"
    command: str | None = None  # the parsed bash command, if any
    error: str | None = None  # why the tool call was malformed, if it was
    engine_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.prompt_ids = _ids(self.prompt_ids)
        self.sampled_ids = _ids(self.sampled_ids)
        self.appended_ids = _ids(self.appended_ids)
        if self.engine_ids is not None:
            self.engine_ids = _ids(self.engine_ids)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32).reshape(-1)
        if self.routing is not None:
            self.routing = np.asarray(self.routing)

    def check(self, where: str = "turn") -> None:
        """Raise TrajectoryError when lengths disagree (never padded or trimmed here)."""
        g = len(self.sampled_ids)
        if len(self.logprobs) != g:
            raise TrajectoryError(f"{where}: {g} sampled ids but {len(self.logprobs)} logprobs")
        if self.routing is None:
            return
        r = self.routing
        if r.ndim != 3:
            raise TrajectoryError(
                f"{where}: routing must be [rows, layers, k], got shape {r.shape}"
            )
        if r.dtype not in (np.uint8, np.uint16):
            raise TrajectoryError(f"{where}: routing must be uint8 or uint16, got {r.dtype}")
        end = len(self.prompt_ids) + g - 1
        if self.routing_start < 0 or self.routing_start + r.shape[0] > max(end, 0):
            raise TrajectoryError(
                f"{where}: routing rows {self.routing_start}..{self.routing_start + r.shape[0]} "
                f"exceed prompt {len(self.prompt_ids)} + sampled {g} - 1 = {end}"
            )


@dataclass
class Trajectory:
    """One rollout: turns, then the verifier's per-assertion outcomes and the reward."""

    task_id: str
    status: Status
    turns: list[Turn] = field(default_factory=list)
    reason: str = ""
    assertions: list[tuple[str, str]] = field(default_factory=list)  # (name, outcome)
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.assertions = [(str(n), str(o)) for n, o in self.assertions]

    @property
    def sampled_tokens(self) -> int:
        return sum(len(t.sampled_ids) for t in self.turns)

    def check(self, where: str = "trajectory") -> None:
        shapes = {t.routing.shape[1:] for t in self.turns if t.routing is not None}
        if len(shapes) > 1:
            raise TrajectoryError(
                f"{where}: turns disagree on routing (layers, k): {sorted(shapes)}"
            )
        dtypes = {t.routing.dtype for t in self.turns if t.routing is not None}
        if len(dtypes) > 1:
            raise TrajectoryError(
                f"{where}: turns disagree on routing dtype: {sorted(map(str, dtypes))}"
            )
        for i, t in enumerate(self.turns):
            t.check(f"{where}: turn {i}")


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def save_trajectory(traj: Trajectory, path: str | Path) -> Path:
    """Write `traj` as directory `path` (atomically: temp directory + rename)."""
    path = Path(path)
    traj.check(str(path))
    tokens: list[np.ndarray] = []
    lines: list[dict[str, Any]] = []
    prev = np.zeros(0, np.int32)
    for i, t in enumerate(traj.turns):
        shared = _common_prefix(prev, t.prompt_ids)
        tokens += [t.prompt_ids[shared:], t.sampled_ids, t.appended_ids]
        lines.append(
            {
                "turn": i,
                "prompt_shared": shared,
                "prompt_tail": int(len(t.prompt_ids) - shared),
                "sampled": int(len(t.sampled_ids)),
                "appended": int(len(t.appended_ids)),
                "routing_start": int(t.routing_start),
                "routing_rows": None if t.routing is None else int(t.routing.shape[0]),
                "engine_ids": None if t.engine_ids is None else int(len(t.engine_ids)),
                "finish_reason": t.finish_reason,
                "observation": t.observation,
                "command": t.command,
                "error": t.error,
            }
        )
        prev = np.concatenate([t.prompt_ids, t.sampled_ids, t.appended_ids])
    tok = np.concatenate(tokens) if tokens else np.zeros(0, np.int32)
    lp = np.concatenate([t.logprobs for t in traj.turns]) if traj.turns else np.zeros(0, np.float32)
    routed = [t.routing for t in traj.turns if t.routing is not None]
    raw = [t.engine_ids for t in traj.turns if t.engine_ids is not None]
    eng = np.concatenate(raw) if raw else None
    sidecars: dict[str, Any] = {
        "tokens": {"file": "tokens.npy", "dtype": "int32", "shape": list(tok.shape)},
        "logprobs": {"file": "logprobs.npy", "dtype": "float32", "shape": list(lp.shape)},
        "engine_ids": None
        if eng is None
        else {"file": "engine_ids.npy", "dtype": "int32", "shape": list(eng.shape)},
        "routing": None,
    }
    rt = None
    if routed:
        rt = np.concatenate(routed)
        sidecars["routing"] = {
            "file": "routing.npy",
            "dtype": str(rt.dtype),
            "shape": list(rt.shape),
        }
    header = {
        "kind": KIND,
        "schema_version": traj.schema_version,
        "task_id": traj.task_id,
        "status": traj.status.value,
        "reason": traj.reason,
        "reward": traj.reward,
        "assertions": [{"name": n, "outcome": o} for n, o in traj.assertions],
        "metadata": traj.metadata,
        "turns": len(traj.turns),
        "sidecars": sidecars,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        np.save(tmp / "tokens.npy", tok)
        np.save(tmp / "logprobs.npy", lp)
        if rt is not None:
            np.save(tmp / "routing.npy", rt)
        if eng is not None:
            np.save(tmp / "engine_ids.npy", eng)
        with open(tmp / HEADER_FILE, "w") as f:
            for obj in [header, *lines]:
                f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(0o755)
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _load_sidecar(path: Path, spec: dict[str, Any], name: str) -> np.ndarray:
    file = path / spec["file"]
    try:
        arr = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise TrajectoryError(f"{file}: cannot read {name} sidecar: {e}") from None
    if str(arr.dtype) != spec["dtype"] or list(arr.shape) != list(spec["shape"]):
        raise TrajectoryError(
            f"{file}: {name} is {arr.dtype} {list(arr.shape)}, header says {spec['dtype']} {spec['shape']}"
        )
    return arr


def read_header(path: str | Path) -> dict[str, Any]:
    """The header line of a trajectory directory (cheap: no sidecars read)."""
    file = Path(path) / HEADER_FILE
    try:
        with open(file) as f:
            header = json.loads(f.readline())
    except FileNotFoundError:
        raise TrajectoryError(f"{file}: no such trajectory file") from None
    except json.JSONDecodeError as e:
        raise TrajectoryError(f"{file}: header is not JSON: {e}") from None
    if header.get("kind") != KIND:
        raise TrajectoryError(f"{file}: not a trajectory (kind {header.get('kind')!r})")
    if header.get("schema_version") not in READABLE_VERSIONS:
        raise TrajectoryError(
            f"{file}: schema_version {header.get('schema_version')!r}, this code reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    return header


def load_trajectory(path: str | Path) -> Trajectory:
    """Read a directory written by `save_trajectory`; validates versions and every shape."""
    path = Path(path)
    file = path / HEADER_FILE
    header = read_header(path)
    with open(file) as f:
        lines = [json.loads(line) for line in f.read().splitlines()[1:] if line.strip()]
    if len(lines) != header["turns"]:
        raise TrajectoryError(f"{file}: header says {header['turns']} turns, found {len(lines)}")
    side = header["sidecars"]
    tok = _load_sidecar(path, side["tokens"], "tokens")
    lp = _load_sidecar(path, side["logprobs"], "logprobs")
    rt = _load_sidecar(path, side["routing"], "routing") if side["routing"] else None
    eng = _load_sidecar(path, side["engine_ids"], "engine_ids") if side.get("engine_ids") else None
    turns: list[Turn] = []
    o = lo = ro = eo = 0
    prev = np.zeros(0, np.int32)
    for i, ln in enumerate(lines):
        if ln.get("turn") != i:
            raise TrajectoryError(f"{file}: line {i + 2} is turn {ln.get('turn')!r}, expected {i}")
        shared, n_tail, g, a = ln["prompt_shared"], ln["prompt_tail"], ln["sampled"], ln["appended"]
        if shared > len(prev) or o + n_tail + g + a > len(tok):
            raise TrajectoryError(f"{file}: turn {i} lengths exceed the stored tokens")
        prompt = np.concatenate([prev[:shared], tok[o : o + n_tail]])
        sampled = tok[o + n_tail : o + n_tail + g]
        appended = tok[o + n_tail + g : o + n_tail + g + a]
        o += n_tail + g + a
        rows = ln["routing_rows"]
        routing = None
        if rows is not None:
            if rt is None or ro + rows > len(rt):
                raise TrajectoryError(
                    f"{file}: turn {i} has {rows} routing rows beyond the sidecar"
                )
            routing, ro = rt[ro : ro + rows], ro + rows
        n_eng = ln.get("engine_ids")
        engine_ids = None
        if n_eng is not None:
            if eng is None or eo + n_eng > len(eng):
                raise TrajectoryError(f"{file}: turn {i} has {n_eng} engine ids beyond the sidecar")
            engine_ids, eo = eng[eo : eo + n_eng], eo + n_eng
        turn = Turn(
            prompt_ids=prompt,
            sampled_ids=sampled,
            logprobs=lp[lo : lo + g],
            routing=routing,
            routing_start=ln["routing_start"],
            appended_ids=appended,
            observation=ln.get("observation", ""),
            finish_reason=ln.get("finish_reason", "stop"),
            command=ln.get("command"),
            error=ln.get("error"),
            engine_ids=engine_ids,
        )
        lo += g
        turns.append(turn)
        prev = np.concatenate([prompt, sampled, appended])
    if (
        o != len(tok)
        or lo != len(lp)
        or (rt is not None and ro != len(rt))
        or (eng is not None and eo != len(eng))
    ):
        raise TrajectoryError(f"{file}: sidecars hold more than the turns describe")
    try:
        status = Status(header["status"])
    except ValueError:
        raise TrajectoryError(f"{file}: unknown status {header['status']!r}") from None
    traj = Trajectory(
        task_id=header["task_id"],
        status=status,
        turns=turns,
        reason=header.get("reason", ""),
        assertions=[(a["name"], a["outcome"]) for a in header.get("assertions", [])],
        reward=header.get("reward"),
        metadata=header.get("metadata", {}),
    )
    traj.check(str(file))
    return traj


def find_trajectories(root: str | Path) -> list[Path]:
    """Trajectory directories under `root` (any depth), sorted."""
    return sorted(
        p.parent for p in Path(root).rglob(HEADER_FILE) if not p.parent.name.startswith(".")
    )
