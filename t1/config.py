"""One config schema for every campaign: frozen dataclasses (t1.config_sections, every name
re-exported here) loaded from YAML.

    cfg = load_config("workflow/config/tiny.yaml")
    cfg.ppo.clip_eps        # 0.2

Unknown keys are errors (naming the file and the dotted key), so a typo never silently falls
back to a default. `workflow/schemas/config.schema.json` is generated from these dataclasses
(`python -m t1.config --schema`) and a test keeps the two in step.

Each section (t1/config_sections.py) belongs to the module named in its docstring; add fields
there, with a default that suits the tiny CPU campaign, and regenerate the schema.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
import weakref
from pathlib import Path
from typing import Any

import yaml

from t1.config_sections import (  # noqa: F401 - re-exported: t1.config is the one entry
    AblationsConfig,
    AgentConfig,
    CampaignConfig,
    Config,
    ConfigError,
    CriticWarmupConfig,
    EngineConfig,
    FamiliesConfig,
    FleetConfig,
    ModelConfig,
    PPOConfig,
    PretrainConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    SandboxConfig,
    SFTConfig,
    SynthConfig,
    TasksConfig,
    TitoConfig,
    TokenizerConfig,
    TrainConfig,
)


def _build(cls: type, data: Any, where: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: {where or 'top level'} must be a mapping, got {type(data).__name__}"
        )
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(names))})")
    kwargs = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        kwargs[name] = _coerce(hints[name], value, key, source)
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as e:  # a __post_init__ check
        raise ConfigError(f"{source}: {where or 'top level'}: {e}") from None
    key = id(obj)
    _GIVEN[key] = (weakref.ref(obj, lambda _r: _GIVEN.pop(key, None)), source, data)
    return obj


# id(section) -> (weak reference, file, the keys that file set): kept beside the objects, whose
# __dict__ other code spreads into constructors (Config(**{**cfg.__dict__, ...}))
_GIVEN: dict[int, tuple[Any, str, Any]] = {}


def given_keys(section: Any) -> tuple[str, frozenset[str]] | None:
    """(file, the keys that file set) of a section `load_config` built, or None for one built
    otherwise (a default, `dataclasses.replace`): t1.model.spec reports only the keys a config
    file sets."""
    entry = _GIVEN.get(id(section))
    if entry is None or entry[0]() is not section:
        return None
    return entry[1], frozenset(entry[2])


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, source)
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key} must be a list")
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise ConfigError(f"{source}: {key} must be {tp.__name__}, got {value!r}")
        return value
    raise ConfigError(f"{source}: {key}: unsupported type {tp}")


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
    """Load and validate a campaign config; `overrides` maps dotted keys to values."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from None
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return _build(Config, data, "", str(path))


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


if __name__ == "__main__":
    if sys.argv[1:] == ["--schema"]:
        from t1.config_schema import json_schema

        print(json.dumps(json_schema(Config), indent=2))
    else:
        print("usage: python -m t1.config --schema", file=sys.stderr)
        sys.exit(2)
