"""Launch lines of the rollout fleet: SGLang servers, SGLang's router, and the health watcher.

    python -m t1.engine.launch watch --url http://127.0.0.1:30000 [--interval 10] -- CMD ...
    t1 segment ... --dry-run        # prints these lines for every replica (t1/run/plan.py)

`server_command` is one replica's `python -m sglang.launch_server` line for the config:
`--tp-size fleet.tp`, `--ep-size fleet.ep`, `--enable-return-routed-experts` (R³ needs every
token's expert ids), `--weight-version` (echoed in each answer's `meta_info.weight_version`;
the client refuses samples of another version), `--enable-deterministic-inference` when
`run.deterministic`, and `--nnodes/--node-rank/--dist-init-addr` when a replica spans nodes
(tp > GPUs per node). With `fleet.server: t1` it is `t1 serve` instead (same HTTP schema,
the CPU stand-in the Slurm CI runs). `router_command` is `python -m sglang_router.launch_router` over the
replicas (cache-aware policy) for the consumers that want one URL (evaluation, synthesis);
the rollout client (t1/engine/fleet.py) routes itself, because it must know which replica a
trajectory lives on to re-sample it when that replica dies, and must load each replica's
weights separately to stop the step when one load fails.

`watch` runs a server and turns its health into the supervisor's heartbeat: it touches
$T1_HEARTBEAT_FILE each time `GET URL/health` answers 200, so a server that hangs (up, but
not answering: deadlocked, SIGSTOPped) goes stale and `t1 supervise` kills and restarts it, as
it does a dead one. The watcher itself never kills a hung server: under `t1 supervise` the
stale heartbeat catches it; in a segment's replica job steps (no heartbeat file) the segment's
driver does (t1/run/replica_watch.py: its own /health checks, then scancel and SIGKILL of the
step). It exits with the server's exit code; SIGTERM and SIGINT are passed on, with a SIGCONT
so that a stopped server gets them too; the server dies with the watcher (PR_SET_PDEATHSIG:
a SIGKILL, which reaches a stopped process as well).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from t1.httpjson import get_ok
from t1.store.lock import die_with_parent

SGLANG_SERVER = ["python", "-m", "sglang.launch_server"]
SGLANG_ROUTER = ["python", "-m", "sglang_router.launch_router"]
T1_SERVE = ["python", "-m", "t1.cli", "serve"]  # fleet.server t1: the CPU stand-in for SGLang
DIST_PORT_OFFSET = 1000  # a multi-node replica's torch.distributed port: fleet.port + this


def server_command(
    cfg,
    model_path: str,
    *,
    host: str = "0.0.0.0",
    weight_version: str | None = None,
    nnodes: int = 1,
    node_rank: int | str = 0,
    head: str = "",
    port: int | None = None,
    config_path: str | None = None,
) -> list[str]:
    """One SGLang server of the fleet (one node of it when the replica spans `nnodes`); with
    `fleet.server: t1`, `t1 serve` on the config at `config_path` (the CPU stand-in)."""
    f = cfg.fleet
    port = f.port if port is None else port
    if f.server == "t1":
        if config_path is None or nnodes > 1:
            raise ValueError("fleet.server t1 (t1 serve) needs the config path and one node")
        cmd = [*T1_SERVE, "--config", str(config_path), "--model", str(model_path)]
        cmd += ["--host", host, "--port", str(port)]
        return cmd + (["--weight-version", weight_version] if weight_version is not None else [])
    if f.server != "sglang":
        raise ValueError(f"fleet.server is {f.server!r}; known: sglang, t1 (t1 serve)")
    if f.tp < 1 or f.ep < 1 or f.tp % f.ep:
        raise ValueError(f"fleet.tp {f.tp} must be a positive multiple of fleet.ep {f.ep}")
    cmd = [*SGLANG_SERVER, "--model-path", str(model_path), "--host", host, "--port", str(port)]
    cmd += ["--tp-size", str(f.tp)]
    if f.ep > 1:
        cmd += ["--ep-size", str(f.ep)]
    cmd += ["--dtype", cfg.engine.dtype, "--mem-fraction-static", f"{f.mem_fraction:g}"]
    cmd += ["--context-length", str(cfg.agent.context_tokens)]
    cmd += ["--enable-return-routed-experts", "--random-seed", str(cfg.run.seed)]
    if weight_version is not None:
        cmd += ["--weight-version", weight_version]
    if cfg.run.deterministic:
        cmd += ["--enable-deterministic-inference"]
    if nnodes > 1:
        if not head:
            raise ValueError("a replica over several nodes needs its head node (--dist-init-addr)")
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank)]
        cmd += ["--dist-init-addr", f"{head}:{f.port + DIST_PORT_OFFSET}"]
    return cmd


def router_command(cfg, worker_urls: list[str], host: str = "0.0.0.0") -> list[str]:
    """SGLang's router over the replicas (one URL for evaluation and synthesis)."""
    if not worker_urls:
        raise ValueError("the router needs at least one worker URL")
    return [
        *SGLANG_ROUTER,
        "--worker-urls",
        *worker_urls,
        "--policy",
        "cache_aware",
        "--host",
        host,
        "--port",
        str(cfg.fleet.router_port),
    ]


def watch_command(url: str, cmd: list[str], interval_s: float) -> list[str]:
    """`cmd` under the health watcher (the supervisor's child for one replica)."""
    return [
        "python",
        "-m",
        "t1.engine.launch",
        "watch",
        "--url",
        url,
        "--interval",
        f"{interval_s:g}",
        "--",
        *cmd,
    ]


def as_line(cmd: list[str]) -> str:
    return shlex.join(cmd)


def healthy(url: str, timeout_s: float) -> bool:
    """GET URL/health answered 200 within `timeout_s` (any failure, a cut answer too: False)."""
    return get_ok(url.rstrip("/") + "/health", timeout=timeout_s)


def watch(url: str, cmd: list[str], interval_s: float, heartbeat: str | None) -> int:
    """Run `cmd`; touch `heartbeat` whenever `url` is healthy; return cmd's exit code."""
    proc = subprocess.Popen(cmd, preexec_fn=die_with_parent)  # a killed watcher kills it

    def forward(signum, frame) -> None:
        proc.send_signal(signum)
        proc.send_signal(signal.SIGCONT)  # a stopped server acts on it too

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    beat = Path(heartbeat) if heartbeat else None
    while proc.poll() is None:
        if healthy(url, timeout_s=max(1.0, interval_s)) and beat is not None:
            beat.touch()
        deadline = time.monotonic() + interval_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m t1.engine.launch", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    w = sub.add_parser("watch", help="run a server; its health is the heartbeat")
    w.add_argument("--url", required=True, help="the server's base URL")
    w.add_argument("--interval", type=float, default=10.0, help="seconds between health checks")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the server command")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the server command after --")
    return watch(args.url, cmd, args.interval, os.environ.get("T1_HEARTBEAT_FILE"))


if __name__ == "__main__":
    sys.exit(main())
