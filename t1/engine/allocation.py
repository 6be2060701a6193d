"""How one Slurm allocation splits between the trainer's nodes and the rollout fleet's replicas.

The segment's plan (t1/run/plan.py) and the rollout client (t1/engine/fleet.py, which finds
its replicas' URLs from the allocation) read the same split: trainer nodes first, then each
replica's `ceil(fleet.tp / campaign.gpus)` nodes; with `fleet.colocate` every node is the
trainer's and replica r runs on node r mod N beside it.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from typing import Any


def allocation_hosts(cfg) -> tuple[list[str] | None, str]:
    """The allocation's node names (scontrol show hostnames), or None and why not."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return None, "SLURM_JOB_NODELIST is not set (not inside an allocation)"
    if shutil.which("scontrol") is None:
        return None, "scontrol is not installed"
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
    )
    if out.returncode:
        return None, f"scontrol show hostnames {nodelist}: {out.stderr.strip()}"
    return out.stdout.split(), f"SLURM_JOB_NODELIST={nodelist}"


def gpus_per_node(cfg) -> int:
    return max(1, cfg.campaign.gpus)


def nodes_per_replica(cfg) -> int:
    return max(1, math.ceil(cfg.fleet.tp / gpus_per_node(cfg)))


def split_allocation(cfg, hosts: list[str]) -> dict[str, Any]:
    """Trainer nodes first, then each replica's nodes; the replicas' URLs and the router's.

    `fleet.colocate`: the trainer has every node and replica r runs on node r mod N at port
    `fleet.port + r`, as its own job step beside the trainer's (srun --overlap): the
    single-node split of the Slurm CI."""
    f = cfg.fleet
    per = nodes_per_replica(cfg)
    if f.colocate:
        if per != 1:
            raise ValueError(
                f"fleet.colocate needs one node per replica; fleet.tp {f.tp} needs {per}"
            )
        if not hosts:
            raise ValueError("the allocation has no nodes")
        replicas = [
            {"index": r, "nodes": [hosts[r % len(hosts)]], "port": f.port + r}
            for r in range(f.replicas)
        ]
        for r in replicas:
            r["url"] = f"http://{r['nodes'][0]}:{r['port']}"
        router = f"http://{hosts[0]}:{f.router_port}" if replicas else None
        return {"trainer": list(hosts), "replicas": replicas, "router": router}
    servers = f.replicas * per
    trainer = len(hosts) - servers
    if trainer < 1:
        raise ValueError(
            f"the allocation has {len(hosts)} nodes; fleet.replicas {f.replicas} x {per} node(s) "
            f"leave none for the trainer (raise campaign.nodes)"
        )
    replicas = []
    for r in range(f.replicas):
        nodes = hosts[trainer + r * per : trainer + (r + 1) * per]
        replicas.append(
            {"index": r, "nodes": nodes, "port": f.port, "url": f"http://{nodes[0]}:{f.port}"}
        )
    router = f"http://{replicas[0]['nodes'][0]}:{f.router_port}" if replicas else None
    return {"trainer": hosts[:trainer], "replicas": replicas, "router": router}
