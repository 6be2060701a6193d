"""Executed reward: per-assertion verifier outcomes -> one scalar per trajectory.

    from t1.verify.reward import RewardSpec, pin_reward, task_record
    spec = pin_reward(run_dir / "manifest.json", "dense", 0, True, pool="results/tiny/pool/train")
    rec = task_record("results/tiny/pool/train/tasks/00003-stats-debug")  # assertions, no-op
    r = spec.score(passed=11, total=13, noop_passed=rec.noop_passed, noop_total=rec.noop_total)

There is no command of its own; `t1 segment` pins the spec, `t1 rollout` and `t1 oracle` score.

dense  = clip(passed - noop_passed, 0, scale) / scale. The scale is ONE number for the whole
         run (so a task with more assertions carries more signal): `reward.scale` when > 0,
         else (0, the default) the largest assertion count of the train pool
         (`scale_for_pool`). `t1 segment` pins it in the run's manifest
         (results/<run>/manifest.json) before the first step (`pin_reward`); a resumed run
         whose config names another scale refuses to start, naming both. The reward lies in
         [0, 1]: above the scale only a verifier reporting more assertions than the task has
         can go (a forged report), and it gains nothing.
binary = 1.0 iff resolved: total > 0 and every assertion passed (kept as the ablation);
         with no-op subtraction max(0, resolved - noop_resolved).
no-op subtraction (`reward.subtract_noop`): subtract what the task scores with no agent
         action at all, as measured when its pool was validated (`t1 oracle --agent noop`,
         recorded per task in the pool manifest as noop_passed / noop_total; `task_record`
         reads it), clamped at 0: doing nothing, or breaking what held before, scores 0.
         A task without a measured no-op is an error when subtracting, never a silent 0.
malformed calls (`reward.malformed_calls`): `score` (the recipe) leaves the verifier's score
         alone; `zero` gives 0 to a trajectory with any malformed tool call (one the agent loop
         answered with an error), whatever its verifier passed. A policy that recovers from a
         broken call within its turns otherwise earns the full reward, and PPO reinforces the
         broken call's tokens with it (LOG.md, 2026-12-06). Evaluation's `resolved` is the
         verifier's alone under either rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from t1.records import write_json_atomic

KINDS = ("dense", "binary")
MALFORMED_CALLS = ("score", "zero")
MANIFEST_SCHEMA_VERSION = 1


class RewardError(ValueError):
    """A reward cannot be computed or recorded as asked; the message says why."""


def resolved(passed: int, total: int) -> bool:
    """All assertions pass, and there was at least one."""
    return total > 0 and passed == total


def dense(passed: int, scale: float, noop_passed: int = 0) -> float:
    """clip(passed - noop_passed, 0, scale) / scale; scale > 0 is the run's fixed scale."""
    if scale <= 0:
        raise RewardError(f"dense reward needs a positive scale, got {scale}")
    if passed < 0 or noop_passed < 0:
        raise RewardError(f"assertion counts must be >= 0, got {passed} and {noop_passed}")
    return min(max(passed - noop_passed, 0), scale) / scale


def binary(passed: int, total: int, noop_resolved: bool = False) -> float:
    """1.0 iff resolved; 0.0 when the task was already resolved with no action."""
    return max(0.0, float(resolved(passed, total)) - float(noop_resolved))


def scale_for_pool(totals: Iterable[int]) -> float:
    """The largest assertion count in a pool: a dense scale under which no task exceeds 1."""
    totals = list(totals)
    if not totals or max(totals) <= 0:
        raise RewardError("cannot size a dense scale on a pool without assertions")
    return float(max(totals))


@dataclass(frozen=True)
class RewardSpec:
    """How a run turns verifier outcomes into reward; recorded once in the run manifest."""

    kind: str = "dense"
    scale: float = 10.0
    subtract_noop: bool = False
    malformed_calls: str = "score"  # score | zero (the module docstring)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RewardError(f"reward kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.malformed_calls not in MALFORMED_CALLS:
            raise RewardError(
                f"reward malformed_calls must be one of {', '.join(MALFORMED_CALLS)}, got "
                f"{self.malformed_calls!r}"
            )
        if self.kind == "dense" and not self.scale > 0:
            raise RewardError(f"dense reward needs a positive scale, got {self.scale}")

    def score(
        self,
        passed: int,
        total: int,
        noop_passed: int = 0,
        noop_total: int = 0,
        malformed: int = 0,
    ) -> float:
        """Reward of one trajectory; noop_* are the task's no-op outcomes (used if subtracting),
        `malformed` its malformed tool calls (0 reward for any under malformed_calls zero)."""
        if malformed < 0:
            raise RewardError(f"malformed call count must be >= 0, got {malformed}")
        if malformed and self.malformed_calls == "zero":
            return 0.0
        if not self.subtract_noop:
            noop_passed, noop_total = 0, 0
        if self.kind == "dense":
            return dense(passed, self.scale, noop_passed)
        return binary(passed, total, resolved(noop_passed, noop_total))


def record_reward_spec(
    manifest: str | Path,
    kind: str = "dense",
    scale: float = 10.0,
    subtract_noop: bool = False,
    malformed_calls: str = "score",
) -> RewardSpec:
    """Write the run's reward spec into `manifest` (JSON), or check it against the one there.

    The manifest may already hold other sections (they are kept). If it already records a
    reward spec that differs, raise RewardError: the scale is fixed for the whole run. The
    file is replaced atomically (temp file + rename), never left half written.
    """
    manifest = Path(manifest)
    spec = RewardSpec(
        kind=kind, scale=float(scale), subtract_noop=subtract_noop, malformed_calls=malformed_calls
    )
    data: dict = {}
    if manifest.exists():
        data = _read_json(manifest)
        if "reward" in data:
            old = RewardSpec(**data["reward"])
            if old != spec:
                raise RewardError(
                    f"{manifest}: this run's reward is fixed as {old}; refusing to change it to "
                    f"{spec} (start a new run to use another scale)"
                )
            return old
    data.setdefault("schema_version", MANIFEST_SCHEMA_VERSION)
    data.setdefault("status", "running")
    data["reward"] = asdict(spec)
    write_json_atomic(manifest, data, indent=2, sort_keys=True)
    return spec


def read_reward_spec(manifest: str | Path) -> RewardSpec:
    """The reward spec recorded in a run manifest (RewardError if there is none)."""
    manifest = Path(manifest)
    if not manifest.exists():
        raise RewardError(f"{manifest}: no such run manifest")
    data = _read_json(manifest)
    if not isinstance(data.get("reward"), dict):
        raise RewardError(f"{manifest}: no 'reward' section (record_reward_spec writes it)")
    try:
        return RewardSpec(**data["reward"])
    except TypeError as e:
        raise RewardError(f"{manifest}: bad 'reward' section: {e}") from None


def pin_reward(
    manifest: str | Path,
    kind: str,
    scale: float,
    subtract_noop: bool,
    pool: str | Path | None = None,
    malformed_calls: str = "score",
) -> RewardSpec:
    """The run's reward spec: recorded in `manifest` at the first call, checked at every later one.

    `scale` is the config's `reward.scale`: > 0 fixes it by hand; 0 derives it from the pool
    (the largest assertion count of `pool`'s manifest) the first time and keeps the pinned one
    afterwards. A config that names another scale (or kind, or no-op subtraction) than the
    pinned one raises RewardError naming both, so a resumed campaign never trains on another
    scale without noticing.
    """
    manifest = Path(manifest)
    old = read_reward_spec(manifest) if _has_reward(manifest) else None
    if old is not None:
        if scale > 0 and float(scale) != old.scale:
            raise RewardError(
                f"{manifest}: this run's reward scale is pinned at {old.scale:g}, but the config "
                f"says reward.scale {float(scale):g}; a run keeps one scale (set reward.scale back "
                f"to {old.scale:g}, or 0 to keep the pinned one, or start a new run)"
            )
        said = (kind, bool(subtract_noop), malformed_calls)
        if said != (old.kind, old.subtract_noop, old.malformed_calls):
            raise RewardError(
                f"{manifest}: this run's reward is pinned as kind {old.kind!r}, subtract_noop "
                f"{old.subtract_noop}, malformed_calls {old.malformed_calls!r}; the config says "
                f"kind {kind!r}, subtract_noop {bool(subtract_noop)}, malformed_calls "
                f"{malformed_calls!r} (start a new run to change them)"
            )
        return old
    if scale <= 0:
        if pool is None:
            raise RewardError(
                f"{manifest}: reward.scale is 0 (derive it from the pool) but no pool was given"
            )
        try:
            scale = scale_for_pool(r.assertions for r in pool_records(pool).values())
        except RewardError as e:
            raise RewardError(
                f"{Path(pool) / 'manifest.json'}: {e} (reward.scale 0 derives the scale from "
                "the tasks' `assertions`; rebuild the pool with `t1 pool`, or set reward.scale)"
            ) from None
    return record_reward_spec(
        manifest, kind, scale, subtract_noop=subtract_noop, malformed_calls=malformed_calls
    )


def _has_reward(manifest: Path) -> bool:
    return manifest.exists() and isinstance(_read_json(manifest).get("reward"), dict)


# ---------------------------------------------------------------- the pool's validation record


@dataclass(frozen=True)
class TaskRecord:
    """What a pool measured of one task: its assertion count, its no-op outcome (None when
    the pool was built without a no-op run) and the assertion names of its reference run (None
    when not recorded; t1.verify.result.recorded_names)."""

    assertions: int
    noop_passed: int | None = None
    noop_total: int | None = None
    assertion_names: tuple[str, ...] | None = None


_POOLS: dict[Path, tuple[int, dict[Path, TaskRecord]]] = {}


def pool_records(pool: str | Path) -> dict[Path, TaskRecord]:
    """Task directory (resolved) -> TaskRecord, from a pool's manifest.json (t1 pool writes it).
    Read once per manifest version (cached by modification time)."""
    path = (Path(pool) / "manifest.json").resolve()
    try:
        mtime = path.stat().st_mtime_ns
        cached = _POOLS.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RewardError(f"{path}: cannot read the pool manifest: {e}") from None
    _POOLS[path] = (mtime, _records(Path(pool), path, data))
    return _POOLS[path][1]


def _records(pool: Path, path: Path, data: dict) -> dict[Path, TaskRecord]:
    out: dict[Path, TaskRecord] = {}
    for t in data.get("tasks", []):
        if not isinstance(t, dict) or "path" not in t:
            raise RewardError(f"{path}: a task entry without a path: {t!r}")
        d = Path(t["path"])
        d = (d if d.is_absolute() else Path(pool) / d).resolve()
        noop = (t.get("noop_passed"), t.get("noop_total"))
        names = t.get("assertion_names")
        out[d] = TaskRecord(
            int(t.get("assertions") or 0),
            *((int(noop[0]), int(noop[1])) if None not in noop else (None, None)),
            tuple(names) if isinstance(names, list) else None,
        )
    return out


def pool_of(task_dir: str | Path) -> Path | None:
    """The pool a task directory was materialized into (POOL/tasks/NNNNN-id), else None."""
    d = Path(task_dir).resolve()
    pool = d.parent.parent
    return pool if d.parent.name == "tasks" and (pool / "manifest.json").is_file() else None


def task_record(task_dir: str | Path) -> TaskRecord | None:
    """The pool's record of one task directory; None when it is not in a pool."""
    pool = pool_of(task_dir)
    return None if pool is None else pool_records(pool).get(Path(task_dir).resolve())


def read_scale(manifest: str | Path) -> float:
    """The dense scale fixed for the run whose manifest this is."""
    return read_reward_spec(manifest).scale


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RewardError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RewardError(f"{path}: must hold a JSON object")
    return data
