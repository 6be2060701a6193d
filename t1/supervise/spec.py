"""What `t1 supervise` runs: its children and their restart, hang and stop policy.

A spec file (YAML) lists the children; `{workdir}` and `{config}` in commands are filled in;
per-child keys override the policy, whose defaults are the config's `campaign.*`:

    schema_version: 1
    children:
      - name: engine
        role: service
        cmd: [python, -m, sglang.launch_server, --model-path, "{workdir}/actor", --port, "30000"]
        heartbeat: output
        startup_timeout_s: 900
      - name: trainer
        cmd: [t1, segment, --config, "{config}", --iter, "3", --out, "{workdir}/DONE"]

The command after `--` on the command line becomes the main child "main". Every problem is a
`SpecError` naming the file and the key.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

SPEC_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Policy:
    """Restart, hang and stop policy (defaults: the config's `campaign` section)."""

    heartbeat_timeout_s: float = 300.0
    startup_timeout_s: float = 600.0
    max_restarts: int = 3
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    stop_timeout_s: float = 120.0
    stop_margin_s: float = 300.0
    kill_grace_s: float = 10.0


@dataclass(frozen=True)
class ChildSpec:
    name: str
    cmd: list[str]
    role: str = "main"  # main | service
    heartbeat: str = "file"  # file | output | none
    stop_signal: str = "SIGUSR2"  # sent to a main child on stop (services get SIGTERM)
    env: dict[str, str] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)


class SpecError(ValueError):
    """The spec file or arguments are malformed; the message names the file and the key."""


def load_spec(
    path: str | os.PathLike[str] | None, main_cmd: list[str], policy: Policy, subst: dict[str, str]
) -> list[ChildSpec]:
    """Children from a spec file plus, if given, `main_cmd` as the main child "main"."""
    children: list[ChildSpec] = []
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise SpecError(f"{path}: cannot read spec ({e})") from None
        if data.get("schema_version") != SPEC_SCHEMA_VERSION:
            raise SpecError(f"{path}: schema_version must be {SPEC_SCHEMA_VERSION}")
        policy_keys = {f.name for f in fields(Policy)}
        known = {"name", "cmd", "role", "heartbeat", "stop_signal", "env"} | policy_keys
        for i, raw in enumerate(data.get("children") or []):
            where = f"{path}: children[{i}]"
            unknown = sorted(set(raw) - known)
            if unknown:
                raise SpecError(
                    f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
                )
            if not raw.get("name") or not isinstance(raw.get("cmd"), list) or not raw["cmd"]:
                raise SpecError(f"{where}: needs a name and a non-empty cmd list")
            overrides = {k: type(getattr(policy, k))(raw[k]) for k in policy_keys if k in raw}
            children.append(
                ChildSpec(
                    name=str(raw["name"]),
                    cmd=[str(c).format(**subst) for c in raw["cmd"]],
                    role=raw.get("role", "main"),
                    heartbeat=raw.get("heartbeat", "file"),
                    stop_signal=raw.get("stop_signal", "SIGUSR2"),
                    env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
                    policy=replace(policy, **overrides),
                )
            )
    if main_cmd:
        children.append(ChildSpec(name="main", cmd=main_cmd, policy=policy))
    names = [c.name for c in children]
    for c in children:
        if names.count(c.name) > 1:
            raise SpecError(f"{path}: child name {c.name!r} used twice")
        if c.role not in ("main", "service"):
            raise SpecError(f"{path}: {c.name}: role must be main or service, not {c.role!r}")
        if c.heartbeat not in ("file", "output", "none"):
            raise SpecError(f"{path}: {c.name}: heartbeat must be file, output or none")
        if not hasattr(signal, c.stop_signal):
            raise SpecError(f"{path}: {c.name}: unknown stop_signal {c.stop_signal!r}")
    if not any(c.role == "main" for c in children):
        raise SpecError(f"{path or 'arguments'}: no main child (give one after `--` or role: main)")
    return children
