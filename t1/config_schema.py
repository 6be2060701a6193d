"""The JSON schema of the campaign config (t1/config.py's dataclasses), which the workflow
validates every config against (workflow/schemas/config.schema.json; a test keeps the two in
step):

    python -m t1.config --schema > workflow/schemas/config.schema.json

It reads the dataclasses it is given and imports nothing of t1.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def json_schema(cls: type, top: bool = True) -> dict[str, Any]:
    """JSON schema of a config dataclass (`top`: the whole config, with its title)."""
    hints = typing.get_type_hints(cls)
    props = {f.name: _schema_of(hints[f.name]) for f in dataclasses.fields(cls)}
    doc = (cls.__doc__ or "").strip().splitlines()
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if doc and not top:
        out["description"] = doc[0]
    if top:
        out = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "t1 campaign config",
            **out,
        }
    return out


def _schema_of(tp: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(tp):
        return json_schema(tp, top=False)
    if typing.get_origin(tp) is list:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0])}
    if isinstance(tp, types.UnionType):
        raise TypeError("unions are not used in the config")
    return {
        bool: {"type": "boolean"},
        int: {"type": "integer"},
        float: {"type": "number"},
        str: {"type": "string"},
    }[tp]
