"""Executed reward: per-assertion verifier outcomes -> one scalar per trajectory.

    from t1.reward import RewardSpec, record_reward_spec, read_reward_spec
    spec = record_reward_spec(run_dir / "manifest.json", kind="dense", scale=12)  # once per run
    r = spec.score(passed=7, total=9)             # 7 / 12 = 0.5833...

There is no command of its own; `t1 oracle` and the rollout call these functions.

dense  = passed / scale. The scale is ONE number for the whole run (so a task with more
         assertions carries more signal), recorded in the run's manifest before the first
         reward and never changed afterwards (`record_reward_spec` refuses). A good scale is
         the largest assertion count of the run's pool (`scale_for_pool`).
         passed > scale is NOT clipped and NOT an error: clipping would make every task above
         the scale look alike at the top, which is the very signal dense reward exists to
         give, and an error would kill a multi-day run because one synthesized task came out
         larger than the pool it was sized on. The reward stays finite and monotone in
         `passed`; PPO with a critic does not need rewards in [0, 1].
binary = 1.0 iff resolved: total > 0 and every assertion passed (kept as the ablation).
no-op subtraction (optional): subtract what the task scores with no agent action at all
         (dense: (passed - noop_passed) / scale; binary: resolved - noop_resolved). It is not
         clipped at 0: an agent that breaks assertions that held before it acted is worse
         than doing nothing, and the reward says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

KINDS = ("dense", "binary")
MANIFEST_SCHEMA_VERSION = 1


class RewardError(ValueError):
    """A reward cannot be computed or recorded as asked; the message says why."""


def resolved(passed: int, total: int) -> bool:
    """All assertions pass, and there was at least one."""
    return total > 0 and passed == total


def dense(passed: int, scale: float, noop_passed: int = 0) -> float:
    """(passed - noop_passed) / scale; scale > 0 is the run's fixed scale (not clipped)."""
    if scale <= 0:
        raise RewardError(f"dense reward needs a positive scale, got {scale}")
    if passed < 0 or noop_passed < 0:
        raise RewardError(f"assertion counts must be >= 0, got {passed} and {noop_passed}")
    return (passed - noop_passed) / scale


def binary(passed: int, total: int, noop_resolved: bool = False) -> float:
    """1.0 iff resolved, minus 1.0 if the task was already resolved with no action."""
    return float(resolved(passed, total)) - float(noop_resolved)


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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RewardError(f"reward kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "dense" and not self.scale > 0:
            raise RewardError(f"dense reward needs a positive scale, got {self.scale}")

    def score(self, passed: int, total: int, noop_passed: int = 0, noop_total: int = 0) -> float:
        """Reward of one trajectory; noop_* are the task's no-op outcomes (used if subtracting)."""
        if not self.subtract_noop:
            noop_passed, noop_total = 0, 0
        if self.kind == "dense":
            return dense(passed, self.scale, noop_passed)
        return binary(passed, total, resolved(noop_passed, noop_total))


def record_reward_spec(
    manifest: str | Path, kind: str = "dense", scale: float = 10.0, subtract_noop: bool = False
) -> RewardSpec:
    """Write the run's reward spec into `manifest` (JSON), or check it against the one there.

    The manifest may already hold other sections (they are kept). If it already records a
    reward spec that differs, raise RewardError: the scale is fixed for the whole run. The
    file is replaced atomically (temp file + rename), never left half written.
    """
    manifest = Path(manifest)
    spec = RewardSpec(kind=kind, scale=float(scale), subtract_noop=subtract_noop)
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
    _write_json_atomic(manifest, data)
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


def _write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
