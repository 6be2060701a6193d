"""Inference engines behind one protocol (t1/engine/base.py): `local` and `sglang`.

    engine = make_engine(cfg, model_dir)      # cfg.engine.backend picks the implementation
    results = engine.generate([GenerateRequest(input_ids, SamplingParams(...), session_id=...)])

`t1 serve` (t1/engine/serve.py) puts the local engine behind SGLang's HTTP schema, so the
`sglang` client runs for real without a GPU.

Pipeline stage 7 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model.
"""

from __future__ import annotations

from pathlib import Path

from t1.engine.base import Engine, GenerateRequest, GenerateResult, SamplingParams

__all__ = ["Engine", "GenerateRequest", "GenerateResult", "SamplingParams", "make_engine"]


def make_engine(cfg, model_dir: str | Path | None = None) -> Engine:
    """The engine the config asks for: `local` loads `model_dir`; `sglang` talks to `engine.url`,
    or to the fleet's replicas when `fleet.replicas` > 0."""
    if cfg.fleet.replicas > 0 and cfg.engine.backend != "sglang":
        raise ValueError(
            f"fleet.replicas is {cfg.fleet.replicas} but engine.backend is "
            f"{cfg.engine.backend!r}: a fleet is SGLang servers (engine.backend: sglang)"
        )
    if cfg.engine.backend == "local":
        if model_dir is None:
            raise ValueError("engine.backend local needs a policy directory")
        from t1.engine.local import LocalEngine

        return LocalEngine.from_config(cfg, model_dir)
    if cfg.engine.backend == "sglang" and cfg.fleet.replicas > 0:
        from t1.engine.fleet import Fleet, fleet_urls  # several replicas (t1/engine/fleet.py)

        return Fleet.from_config(cfg, fleet_urls(cfg))
    if cfg.engine.backend == "sglang":
        from t1.engine.sglang import SGLangEngine

        return SGLangEngine.from_config(cfg)
    raise ValueError(f"unknown engine.backend {cfg.engine.backend!r} (known: local, sglang)")
