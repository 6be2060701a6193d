"""The plan of one PPO segment on a Slurm allocation: trainer ranks and SGLang replicas.

    t1 segment --config workflow/config/qwen3.5-122b-a10b.yaml --iter 0 --from results/X/sft/model \\
        --out results/X/ppo/iter_00000/DONE --dry-run          # prints this plan, runs nothing
    python -m t1.run.plan replica --config C --index R             # exec replica R's srun line

One allocation of `campaign.nodes` nodes (`campaign.gpus` GPUs of `campaign.gpu_mem_gib` GiB
each) is split: the first nodes hold the trainer ranks (torchrun, c10d rendezvous on the
first trainer node), the last `fleet.replicas x ceil(fleet.tp / gpus)` nodes hold the SGLang
replicas, one job step each (`srun --nodelist`), each under the health watcher
(t1/engine/launch.py) as a `t1 supervise` child, so a dead or hung replica is restarted. The
trainer layout (TP/PP/EP/ETP, DP) is t1.model.memory's planner's cheapest one on the trainer nodes;
memory per role comes from the same planner, and for a replica from its weights shard and
`fleet.mem_fraction`. Replicas start from the SFT actor; every rollout step loads its policy
(the previous step's HF export, `train/actor`) with /update_weights_from_disk first.

Nothing here needs a finished stage: inputs that do not exist yet are listed as "would read".
Node names come from SLURM_JOB_NODELIST inside an allocation, else placeholders node00, ...
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from t1.engine import launch
from t1.engine.allocation import (
    allocation_hosts,
    gpus_per_node,
    split_allocation,
)
from t1.model import memory, memory_breakdown, memory_spec
from t1.run import weight_traffic
from t1.train.launch import RDZV_PORT, in_job_step

GIB = memory_breakdown.GIB


def model_spec(cfg) -> memory_spec.ModelSpec:
    """The planner's spec: the 122B preset when the model matches it, else the config's."""
    p = memory_spec.QWEN35_122B
    m = cfg.model
    if (m.layers, m.hidden, m.experts, m.top_k) == (p.layers, p.hidden, p.experts, p.top_k):
        return p
    return memory_spec.tiny_spec(cfg)


def trainer_layout(cfg, nodes: int) -> dict[str, Any]:
    """The planner's layout and memory per role on the trainer nodes."""
    spec = model_spec(cfg)
    budget = getattr(getattr(cfg, "train", None), "gpu_budget_gib", 95.0)
    if spec.framework == "hf":
        res = memory_breakdown.plan(spec, memory_breakdown.Layout(1, 1, dist_opt=False))
        res.update(fits=True, budget_gib=budget, preset=spec.name)
        return res
    if cfg.campaign.gpu_mem_gib <= 0:
        raise ValueError("campaign.gpu_mem_gib must be set (GiB per GPU) to plan a GPU trainer")
    res = memory.search(spec, gpus_per_node(cfg), cfg.campaign.gpu_mem_gib, budget, nodes)
    return res


def replica_memory(cfg) -> dict[str, float]:
    """GiB per GPU of one replica: its weights shard (bf16) and the KV pool left by mem_fraction."""
    spec = model_spec(cfg)
    f = cfg.fleet
    p = spec.param_counts()
    dense = p["total"] - p["experts"]
    weights = 2 * (dense / f.tp + p["experts"] / f.ep) / GIB
    static = f.mem_fraction * cfg.campaign.gpu_mem_gib
    return {
        "weights": round(weights, 2),
        "kv_pool": round(static - weights, 2),
        "static_total": round(static, 2),
    }


def replica_command(
    cfg, replica: dict[str, Any], model_path: str, config_path: str | None = None
) -> list[str]:
    """srun of one replica, under the health watcher, on its nodes of the allocation
    (`config_path`: the run's config, which `fleet.server: t1` serves with)."""
    f = cfg.fleet
    nodes = replica["nodes"]
    url = replica["url"]
    rank: int | str = "$SLURM_NODEID" if len(nodes) > 1 else 0
    server = launch.server_command(
        cfg,
        model_path,
        weight_version=str(model_path),
        nnodes=len(nodes),
        node_rank=rank,
        head=nodes[0],
        port=replica.get("port", f.port),
        config_path=config_path,
    )
    srun = ["srun", f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}"]
    if cfg.campaign.gpus:
        srun.append(f"--gpus-per-node={cfg.campaign.gpus}")
    srun += [f"--job-name=replica{replica['index']}", "--kill-on-bad-exit=1"]
    if f.colocate or in_job_step():  # colocate: shares the node with the trainer's step
        srun.append("--overlap")
    watched = launch.watch_command(url, server, f.health_interval_s)
    if len(nodes) > 1:  # each node's rank is only known inside the step
        return [
            *srun,
            "bash",
            "-c",
            shlex.join(watched).replace("'$SLURM_NODEID'", "$SLURM_NODEID"),
        ]
    return [*srun, *watched]


def trainer_command(
    cfg, trainer_nodes: list[str], layout: dict[str, Any], train: list[str], rdzv_id: str
) -> tuple[str, list[str]]:
    """The step's `t1 train` over the trainer nodes: torchrun (megatron) or one process (hf)."""
    backend = getattr(getattr(cfg, "train", None), "backend", "hf")
    srun = ["srun", f"--nodes={len(trainer_nodes)}", "--ntasks-per-node=1"]
    srun += [f"--nodelist={','.join(trainer_nodes)}", "--job-name=trainer", "--kill-on-bad-exit=1"]
    if cfg.fleet.colocate or in_job_step():
        srun.append("--overlap")
    if backend != "megatron":
        return backend, [*srun, "t1", *train[1:]]
    gpn = layout["gpus_per_node"]
    if cfg.campaign.gpus:
        srun.append(f"--gpus-per-node={cfg.campaign.gpus}")
    torchrun = ["torchrun", f"--nnodes={len(trainer_nodes)}", f"--nproc-per-node={gpn}"]
    torchrun += ["--rdzv-backend=c10d", f"--rdzv-endpoint={trainer_nodes[0]}:{RDZV_PORT}"]
    torchrun += [f"--rdzv-id={rdzv_id}", "-m", "t1.cli", *train[1:]]
    return backend, [*srun, *torchrun]


def prelaunch_checks(cfg, measured: bool = True) -> list[dict[str, Any]]:
    """What the trainer checks before it launches, run here on `cfg`: with model.init_from the
    checkpoint against the config (t1.model.spec.check), then the memory plan
    (t1.train.megatron.plan.check_plan), then (`measured`, a megatron trainer on GPUs) the
    trainer's real models measured (measured_check). One {check, ok, result} each; never
    raises."""
    from t1.train.megatron.plan import PlanError, check_plan, plan_for

    out = []
    if cfg.model.init_from:
        from t1.model.spec import check

        name = f"model.init_from {cfg.model.init_from} (t1.model.spec.check)"
        try:
            errors = check(cfg)
        except (OSError, ValueError) as e:
            out.append({"check": name, "ok": False, "result": f"cannot read it: {e}"})
        else:
            result = (
                "agrees with the config"
                if not errors
                else (f"{len(errors)} disagreement(s): " + "; ".join(errors))
            )
            out.append({"check": name, "ok": not errors, "result": result})
    name = "memory plan (t1.train.megatron.plan.check_plan, run by the trainer before launch)"
    t = cfg.train
    budget = f"train.gpu_budget_gib {t.gpu_budget_gib:g}"
    try:
        res = check_plan(cfg)
    except PlanError as e:
        roles = ""
        try:
            from t1.model.spec import resolve

            r = plan_for(resolve(cfg))
            roles = f" (actor {r['actor_gib']:.1f} GiB, critic {r['critic_gib']:.1f} GiB)"
        except Exception:  # noqa: BLE001 - the refusal itself is the result
            pass
        out.append({"check": name, "ok": False, "result": f"DOES NOT FIT{roles}: {e}"})
    except Exception as e:  # noqa: BLE001 - the dry run states any failure and prints on
        why = "REFUSED" if isinstance(e, ValueError) else f"ERROR ({type(e).__name__})"
        out.append({"check": name, "ok": False, "result": f"{why}: {e}"})
    else:
        out.append(
            {
                "check": name,
                "ok": True,
                "result": f"fits: actor {res['actor_gib']:.1f} GiB, critic "
                f"{res['critic_gib']:.1f} GiB per process/GPU within {budget} ({t.backend})",
            }
        )
    if measured and t.backend == "megatron" and cfg.campaign.gpus > 0:
        out.append(measured_check(cfg))
    for c in out:  # one line each (a SpecMismatch lists its keys on lines of their own)
        c["result"] = " ".join(c["result"].split())
    return out


def measured_check(cfg) -> dict[str, Any]:
    """The trainer's real megatron-core models at the config's layout, measured under a fake
    process group and FakeTensorMode (t1.train.megatron.measure; ~20 s at the 122B preset):
    the co-resident peak per GPU against train.gpu_budget_gib."""
    from t1.train.megatron.measure import measure

    name = "measured memory (t1 plan-memory --measure: real models, fake process group)"
    try:
        res = measure(cfg)
    except Exception as e:  # noqa: BLE001 - the dry run states any failure and prints on
        return {"check": name, "ok": False, "result": f"ERROR ({type(e).__name__}): {e}"}
    co = res["coresident"]["phase_peak_gib"]
    verdict = "fits" if res["fits"] else "DOES NOT FIT"
    return {
        "check": name,
        "ok": res["fits"],
        "result": f"{verdict}: co-resident peak actor {co['actor']:.1f}, critic {co['critic']:.1f} "
        f"GiB per GPU within train.gpu_budget_gib {res['budget_gib']:g} (attention "
        f"{res['attention']}, 1 x {res['tokens']} tokens)",
    }


def segment_plan(args: argparse.Namespace) -> dict[str, Any]:
    """Everything `t1 segment --dry-run` prints, as data (a test pins it)."""
    from t1.config import load_config
    from t1.run.steps import step_commands, step_dir

    cfg = load_config(args.config)
    c = cfg.campaign
    if cfg.fleet.replicas and cfg.engine.backend != "sglang":
        raise ValueError(f"fleet.replicas {cfg.fleet.replicas} needs engine.backend sglang")
    run_dir = Path(args.run_dir or Path(cfg.run.results_dir) / cfg.run.name)
    k = args.steps or c.steps_per_segment
    steps = list(range(args.iter * k, (args.iter + 1) * k))
    hosts, where = allocation_hosts(cfg)
    if hosts is None:
        hosts = [f"node{i:02d}" for i in range(c.nodes)]
        where = f"placeholders ({where})"
    split = split_allocation(cfg, hosts)
    lay = trainer_layout(cfg, len(split["trainer"]))
    pool = Path(args.pool or run_dir / "pool" / "train")
    sft_actor = Path(args.source) / "actor"
    inputs = {
        "config": (args.config, "t1 run_config"),
        "train pool": (pool / "manifest.json", "rule pool (t1 pool)"),
        "tokenizer": (
            args.tokenizer or run_dir / ("base_model" if cfg.model.init_from else "") / "tokenizer",
            "rule base_model" if cfg.model.init_from else "rule tokenizer",
        ),
        "SFT actor (step 0, replicas' launch weights)": (sft_actor, "rule sft"),
    }
    if args.critic:
        inputs["critic warm-up"] = (Path(args.critic) / "critic", "rule critic_warmup")
    reads = [
        {"what": w, "path": str(p), "exists": Path(p).exists(), "made_by": by}
        for w, (p, by) in inputs.items()
    ]
    per_step = []
    for s in steps:
        sdir = step_dir(run_dir, s)
        prev = step_dir(run_dir, s - 1) / "train" if s > 0 else Path(args.source)
        seed = cfg.run.seed * 1_000_003 + s  # as t1 segment seeds step s
        batch = [f"<{cfg.rollout.launch} task dirs in the pool epoch order>"]
        cmds = step_commands(args.config, prev, sdir, batch, seed, args.tokenizer, args.critic)
        launch_at = cmds["rollout"].index("--launch") + 1
        cmds["rollout"][launch_at] = str(cfg.rollout.launch)
        rdzv = f"t1-{cfg.run.name}-{s:06d}"
        backend, train = trainer_command(cfg, split["trainer"], lay["layout"], cmds["train"], rdzv)
        per_step.append(
            {
                "step": s,
                "weights_update": {
                    "mode": cfg.fleet.weight_update,
                    "model_path": str(prev / "actor"),
                    "replicas": cfg.fleet.replicas,
                },
                "rollout": cmds["rollout"],
                "train": train,
                "checkpoints": {
                    "reads": str(prev),
                    "trainer_checkpoint": str(sdir / "train" / "ckpt"),
                    "hf_export": str(sdir / "train" / "actor"),
                    "done": str(sdir / "train" / "DONE.json"),
                    "data_state": str(sdir / "data.json"),
                    "rollout": str(sdir / "rollout" / "rollout.json"),
                },
            }
        )
    replicas = [
        dict(r, launch=replica_command(cfg, r, str(sft_actor), args.config))
        for r in split["replicas"]
    ]
    router = None
    if replicas:
        router = launch.router_command(cfg, [r["url"] for r in replicas])
    workdir = Path(args.out).parent
    supervise = ["t1", "supervise", "--config", args.config, "--workdir", str(workdir)]
    supervise += ["--deadline", "slurm", "--requeue"]
    if c.children:
        supervise += ["--spec", c.children]
    segment = ["t1", "segment", "--config", args.config, "--iter", str(args.iter)]
    segment += ["--run-dir", str(run_dir), "--from", str(args.source), "--out", str(args.out)]
    sbatch = ["sbatch", f"--job-name=t1-ppo-{cfg.run.name}-{args.iter:05d}", f"--nodes={c.nodes}"]
    sbatch += ["--ntasks-per-node=1", f"--cpus-per-task={c.cpus}", f"--mem={c.mem_mb}M"]
    if c.gpus:
        sbatch.append(f"--gpus-per-node={c.gpus}")
    sbatch += [f"--time={c.segment_minutes}", "--requeue"]
    sbatch += ["--wrap", shlex.join([*supervise, "--", *segment])]
    memory_gib = {r: lay["breakdown"][r]["total"] for r in ("actor", "critic")}
    if cfg.fleet.replicas and cfg.fleet.server == "sglang":  # t1 serve: the CPU, no GPU share
        memory_gib["sglang replica"] = replica_memory(cfg)
    world = lay["layout"]["world"]
    notes = []
    t = getattr(cfg, "train", None)
    if t is not None and t.backend == "megatron":
        want = (t.gpus, t.tensor_parallel, t.pipeline_parallel, t.expert_parallel)
        want += (t.expert_tensor_parallel,)
        got = tuple(lay["layout"][k] for k in ("world", "tp", "pp", "ep", "etp"))
        if want != got:
            notes.append(
                f"train.* asks gpus/TP/PP/EP/ETP {want}; the planner's layout is {got}: "
                "set train.* to the planner's layout"
            )
    gpn = lay["layout"]["gpus_per_node"]
    ranks = [
        {"node": n, "ranks": [i * gpn, (i + 1) * gpn - 1]}
        for i, n in enumerate(split["trainer"][: lay["layout"]["nodes"]])
    ]
    return {
        "run": cfg.run.name,
        "iter": args.iter,
        "steps": steps,
        "allocation": {"nodes": c.nodes, "gpus_per_node": c.gpus, "hosts": hosts, "from": where},
        "sbatch": sbatch,
        "trainer": {
            "nodes": split["trainer"],
            "backend": backend,
            "world": world,
            "ranks": ranks,
            "rendezvous": f"c10d {split['trainer'][0]}:{RDZV_PORT}",
            "layout": lay["layout"],
            "fits": lay["fits"],
            "budget_gib": lay.get("budget_gib"),
        },
        "memory_gib": memory_gib,
        "replicas": replicas,
        "weight_traffic": weight_traffic.per_step(cfg, model_spec(cfg))
        if cfg.fleet.replicas
        else None,
        "router": router,
        "inputs": reads,
        "per_step": per_step,
        "marker": str(args.out),
        "keep_checkpoints": c.keep_checkpoints,
        "notes": notes,
        "checks": prelaunch_checks(cfg, measured=not getattr(args, "no_measure", False)),
    }


def render(plan: dict[str, Any]) -> str:
    """The plan as text, in the order a reader checks it."""
    j = shlex.join
    a, t = plan["allocation"], plan["trainer"]
    lay = t["layout"]
    out = [
        f"# t1 segment plan: run {plan['run']}, segment {plan['iter']}, steps {plan['steps']}",
        f"allocation: {a['nodes']} nodes x {a['gpus_per_node']} GPUs; hosts {a['hosts']} ({a['from']})",
        f"sbatch: {j(plan['sbatch'])}",
        f"trainer ({t['backend']}): nodes {t['nodes']}, world {t['world']}, rendezvous {t['rendezvous']}",
    ]
    out += [f"  ranks {r['ranks'][0]}-{r['ranks'][1]} on {r['node']}" for r in t["ranks"]]
    out.append(
        f"  layout TP={lay['tp']} PP={lay['pp']} EP={lay['ep']} ETP={lay['etp']} DP={lay['dp']} "
        f"(expert DP={lay['edp']}), recompute={lay['recompute']}, "
        f"distributed optimizer={'on' if lay['dist_opt'] else 'off'}; "
        f"{'fits' if t['fits'] else 'DOES NOT FIT'} {t['budget_gib']} GiB per role"
    )
    out += [f"  NOTE: {n}" for n in plan["notes"]]
    out.append("memory per role (GiB per GPU):")
    for role, v in plan["memory_gib"].items():
        if isinstance(v, dict):
            out.append(f"  {role}: " + ", ".join(f"{k} {x}" for k, x in v.items()))
        else:
            out.append(f"  {role}: {v}")
    out.append(f"SGLang replicas: {len(plan['replicas'])}")
    for r in plan["replicas"]:
        out.append(f"  replica {r['index']} on {r['nodes']} at {r['url']}:")
        out.append(f"    {j(r['launch'])}")
    if plan.get("weight_traffic"):
        out += weight_traffic.render(plan["weight_traffic"])
    if plan["router"]:
        out.append(f"router: {j(plan['router'])}")
    out.append("checks before launch:")
    for c in plan.get("checks", []):
        out.append(f"  {c['check']}: {'OK' if c['ok'] else 'FAILED'}: {c['result']}")
    out.append("inputs:")
    for r in plan["inputs"]:
        state = "present" if r["exists"] else f"would read (not there yet; made by {r['made_by']})"
        out.append(f"  {r['what']}: {r['path']} - {state}")
    for s in plan["per_step"]:
        out.append(f"step {s['step']}:")
        w = s["weights_update"]
        if w["replicas"] and w.get("mode") == "distributed":
            out.append(
                f"  the previous step's trainer pushed the actor to {w['replicas']} replicas "
                f"(update_weights_from_distributed); {w['model_path']} reloads a replica that "
                "missed it"
            )
        elif w["replicas"]:
            out.append(f"  update_weights_from_disk {w['model_path']} on {w['replicas']} replicas")
        out.append(f"  rollout: {j(s['rollout'])}")
        out.append(f"  train:   {j(s['train'])}")
        for k, v in s["checkpoints"].items():
            out.append(f"  {k}: {v}")
    out.append(
        f"marker: {plan['marker']} (trainer checkpoints of all but the newest "
        f"{plan['keep_checkpoints']} steps are pruned)"
    )
    return "\n".join(out)


def pool_ready(args: argparse.Namespace) -> bool:
    """Whether the train pool exists (then the dry run also plans each step's batch)."""
    from t1.config import load_config

    cfg = load_config(args.config)
    run_dir = Path(args.run_dir or Path(cfg.run.results_dir) / cfg.run.name)
    return (Path(args.pool or run_dir / "pool" / "train") / "manifest.json").is_file()


def print_plan(args: argparse.Namespace) -> int:
    try:
        plan = segment_plan(args)
    except ValueError as e:
        print(f"t1 segment --dry-run: {args.config}: {e}", file=sys.stderr)
        return 2
    print(render(plan), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m t1.run.plan", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("replica", help="exec replica R's srun line (a t1 supervise child)")
    r.add_argument("--config", required=True)
    r.add_argument("--index", type=int, required=True)
    r.add_argument("--model", required=True, help="launch weights (the SFT actor)")
    r.add_argument("--print", action="store_true", help="print the line instead of running it")
    args = parser.parse_args(argv)
    from t1.config import load_config

    cfg = load_config(args.config)
    hosts, where = allocation_hosts(cfg)
    if hosts is None:
        print(f"python -m t1.run.plan replica: {where}", file=sys.stderr)
        return 2
    replicas = split_allocation(cfg, hosts)["replicas"]
    if not 0 <= args.index < len(replicas):
        print(
            f"python -m t1.run.plan replica: no replica {args.index} of {len(replicas)}",
            file=sys.stderr,
        )
        return 2
    cmd = replica_command(cfg, replicas[args.index], args.model, args.config)
    if args.print:
        print(shlex.join(cmd))
        return 0
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
