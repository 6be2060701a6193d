"""`t1 ablations`: the paper's ablation figures next to ours, one table from measured files.

    t1 ablations --run-dir results/tiny --binary results/tiny-binary --cold results/tiny-cold \\
        --gap results/tiny/ablations/gap.json --drift results/tiny/ablations/drift.json \\
        --critic results/tiny/ablations/critic/seed_*/critic.json --out results/tiny/ablations.md

What `snakemake --profile profiles/local campaign_ablations` runs last
(workflow/rules/ablations.smk runs the measurements before it). One row per ablation:

(a) train-inference gap: `t1 bench gap --rollout RUN/ppo/steps/step_000000/rollout --policy
    RUN/sft/model/actor` (gap.json): (a) text re-tokenized, (b) TITO, (c) TITO + R3.
    Shape: (c) below (a). Paper: 0.021 without, 0.013 with TITO + R3.
(b) TITO drift: `t1 tito-audit --full-json` over every trajectory of the three runs (drift.json),
    against the engine's raw output ids. Counted: the policy's samples (PPO and warm-up
    rollouts, evaluations); expert trajectories (a scripted engine) are listed, not counted.
    Shape: drift exactly 0 (no drifted loss token, no assembly error, no rollout abort by
    TITO). Paper: 0.0000% over 1,402 samples; the count is ours, whatever it is (the issue
    asks >= 1,000).
(c) critic warm-up vs cold start: `t1 bench critic --rollouts` (critic/seed_S/critic.json): both
    critics on the SAME batches (the dense run's PPO rollouts), one run per seed (run.seed S:
    the trainer's minibatch shuffle and the cold arm's fresh value head). Shape, in every seed:
    the warm critic's EV never negative and the cold one's opens negative. Paper: cold opens at
    -33.6, negative 30 of 58 steps; warmed never negative, plateau 0.71-0.86. With --cold, the
    two campaigns' own on-policy curves (each its own batches) are shown beside it.
(d) dense vs binary reward: per PPO step, the resolved rate of the training rollouts (the
    `ppo_step` events of RUN/ppo/steps/step_*/train/metrics.jsonl), and the final evaluation
    (eval/ppo/eval.json, Wilson 95% interval) of both runs against the supervised baseline
    (the binary run's eval/sft/eval.json, or the dense run's where the arm shares its SFT).
    Shape: binary PPO not above the baseline, dense PPO above binary PPO (point estimates;
    the two-proportion test is reported beside). Paper: binary reward never beat the SFT baseline.
(e) SFT vs PPO on held-out tasks: RUN/summary.json's `heldout` (t1 report). Shape: PPO above
    SFT beyond the interval, i.e. the two Wilson 95% intervals do not overlap (the pooled
    two-proportion z-test's p is reported beside, not used for the verdict). Cross-checked
    with RUN/pool/{train,eval}/manifest.json: a held-out split while every eval-pool task is
    in the train pool is "not measurable" (the split is not held out).

Each row: our figure (with its interval or seed spread), the paper's, whether the shape holds
(yes / no / not measurable, and why) and its source files. A missing, empty or unreadable
input, or one whose record is not complete, is an error naming the file (exit 2); a measured
file whose figure is undefined (no trajectory, equal rewards everywhere, no held-out split)
gives "not measurable" with the reason, never a blank. Writes OUT (Markdown), OUT with .json
(the rows and every series) and two PNGs beside OUT: <stem>_critic.png, <stem>_reward.png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from t1.eval.ablations_render import markdown, plot_critic, plot_reward
from t1.eval.stats import intervals_overlap, two_proportion_test
from t1.records import json_safe, write_atomic, write_json_atomic

SCHEMA_VERSION = 1
YES, NO, NOT_MEASURABLE = "yes", "no", "not measurable"
ASKED_TRAJECTORIES = 1000  # issue 14: the drift audit over at least this many

PAPER = {
    "gap": "0.021 without TITO + R3, 0.013 with both",
    "drift": "0.0000% over 1,402 samples",
    "critic": "cold EV opens at -33.6, negative 30 of 58 steps; warmed never negative, "
    "plateau 0.71-0.86",
    "reward": "binary reward never beat the supervised baseline",
    "heldout": "PPO above SFT on held-out tasks",
}
SHAPE = {
    "gap": "TITO + R3 (c) below text (a)",
    "drift": "drift exactly 0",
    "critic": "every seed: warm EV never negative, cold EV opens negative",
    "reward": "binary PPO <= SFT baseline and dense PPO > binary PPO",
    "heldout": "PPO's 95% interval entirely above SFT's",
}


class AblationError(Exception):
    """A missing, empty or unreadable input; the message names the file."""


# ------------------------------------------------------------------ reading inputs


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON record; AblationError naming the file when missing, empty, not JSON, not an
    object, or a record (t1.records) whose status is not "complete"."""
    path = Path(path)
    if not path.is_file():
        raise AblationError(f"{path}: missing ({what})")
    text = path.read_text()
    if not text.strip():
        raise AblationError(f"{path}: empty ({what})")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise AblationError(f"{path}: not JSON ({what}): {e}") from None
    if not isinstance(doc, dict) or not doc:
        raise AblationError(f"{path}: not a JSON object with figures ({what})")
    if "status" in doc and doc["status"] != "complete":
        raise AblationError(f"{path}: status {doc['status']!r}, not complete ({what})")
    return doc


def _need(doc: dict[str, Any], path: str | Path, *keys: str) -> Any:
    """doc[k1][k2]...; AblationError naming the file and the key when absent."""
    node: Any = doc
    for i, k in enumerate(keys):
        if not isinstance(node, dict) or k not in node:
            raise AblationError(f"{path}: no {'.'.join(keys[: i + 1])}")
        node = node[k]
    return node


def _num(x: Any) -> float | None:
    """A finite number, else None (JSON null, NaN written by json.dumps, a string)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float] | None) -> str:
    return "n/a" if not ci else f"[{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]"


def _p(test: dict[str, Any]) -> str:
    return "undefined" if test["p"] is None else f"{test['p']:.3g}"


# ------------------------------------------------------------------ (a) gap


def gap_row(path: str | Path) -> dict[str, Any]:
    doc = read_json(path, "t1 bench gap --json")
    a = _num(_need(doc, path, "a_text_retokenized", "gap"))
    b = _num(_need(doc, path, "b_tito", "gap"))
    c = _num(_need(doc, path, "c_tito_r3", "gap"))
    n = int(_need(doc, path, "trajectories"))
    drift = _num(doc["a_text_retokenized"].get("token_drift_rate"))
    data = {"text": a, "tito": b, "tito_r3": c, "trajectories": n, "token_drift_rate": drift}
    data["replay_mismatch"] = doc["c_tito_r3"].get("replay_mismatch")
    measured = (
        f"(a) text {_f(a)}, (b) TITO {_f(b)}, (c) TITO + R3 {_f(c)} over {n} trajectories "
        f"(text token drift {_pct(drift)})"
    )
    if a is None or c is None:
        holds, why = NOT_MEASURABLE, f"{path}: gap undefined ({n} trajectories with loss tokens)"
    elif c < a:
        holds, why = YES, f"(c) {_f(c)} < (a) {_f(a)}"
    else:
        holds, why = NO, f"(c) {_f(c)} >= (a) {_f(a)}"
    return _row("gap", "(a) train-inference gap", measured, holds, why, [path], data)


def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


# ------------------------------------------------------------------ (b) drift


def drift_row(path: str | Path) -> dict[str, Any]:
    """Counted over the trajectories the policy's engine sampled (PPO and warm-up rollouts,
    evaluations); expert trajectories (a scripted engine replaying reference solutions) are
    listed beside, not counted."""
    doc = read_json(path, "t1 tito-audit --full-json")
    errors = _need(doc, path, "errors")
    aborted = _need(doc, path, "tito_aborted")
    self_checked = int(_need(doc, path, "self_checked"))
    kinds: dict[str, int] = {}
    n = loss = drifted = 0
    for d, c in _need(doc, path, "by_dir").items():
        kind = _kind(d)
        kinds[kind] = kinds.get(kind, 0) + int(c["engine_checked"])
        if kind != "expert":
            n += int(c["engine_checked"])
            loss += int(c["engine_loss_tokens"])
            drifted += int(c["engine_drift_tokens"])
    rate = drifted / loss if loss else None
    data = {
        "trajectories": n,
        "loss_tokens": loss,
        "drift_tokens": drifted,
        "drift_rate": rate,
        "errors": len(errors),
        "tito_aborted": len(aborted),
        "self_checked": self_checked,
        "by_kind": kinds,
        "asked": ASKED_TRAJECTORIES,
    }
    where = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()) if v and k != "expert")
    measured = (
        f"{drifted} drifted of {loss} loss tokens ({_pct4(rate)}) over {n} policy-sampled "
        f"trajectories checked against the engine's ids ({where or 'none'}); assembly errors "
        f"{len(errors)}, aborted by TITO {len(aborted)}; not counted: {kinds.get('expert', 0)} "
        f"expert, {self_checked} without engine ids"
    )
    if n == 0 or loss == 0:
        holds = NOT_MEASURABLE
        why = f"{path}: no policy-sampled trajectory carries the engine's output ids"
    elif drifted or errors or aborted:
        holds, why = NO, f"{drifted} drifted tokens, {len(errors)} errors, {len(aborted)} aborts"
    else:
        holds, why = YES, "0 drifted tokens, 0 errors, 0 aborts"
    if n < ASKED_TRAJECTORIES:
        why += f"; {n} trajectories, fewer than the {ASKED_TRAJECTORIES:,} the issue asks"
    return _row("drift", "(b) TITO drift", measured, holds, why, [path], data)


def _pct4(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.4f}%"


def _kind(rollout_dir: str) -> str:
    p = Path(rollout_dir).as_posix()
    if "/ppo/steps/" in p:
        return "PPO rollouts"
    if "/eval/" in p:
        return "evaluations"
    if "/critic/rollout" in p:
        return "critic warm-up rollouts"
    if "/sft/expert" in p:
        return "expert"
    if "/ablations/drift_rollout" in p:
        return "drift rollout"  # ablations.smk: the SFT policy over the train pool, for (b)
    return "other"


# ------------------------------------------------------------------ (c) critic


def critic_row(
    paths: Sequence[str | Path], campaign: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`paths`: one `t1 bench critic --json` per seed; `campaign`: the two campaigns' own
    curves ({"warm": curve record, "cold": ...}, t1.bench.critic.from_metrics), or None."""
    if not paths:
        raise AblationError("no critic.json given (t1 bench critic --json, one per seed)")
    seeds = []
    for path in paths:
        doc = read_json(path, "t1 bench critic --json")
        arms = {}
        for arm in ("warm", "cold"):
            ev = _need(doc, path, "arms", arm, "explained_variance")
            if not ev:
                raise AblationError(f"{path}: arms.{arm}.explained_variance is empty")
            summary = _need(doc, path, "arms", arm, "summary")
            arms[arm] = {"explained_variance": [_num(v) for v in ev], "summary": summary}
        seeds.append({"path": str(path), "config": doc.get("config"), **arms})
    steps = len(seeds[0]["warm"]["explained_variance"])
    warm = [s["warm"]["summary"] for s in seeds]
    cold = [s["cold"]["summary"] for s in seeds]
    undefined = [s["path"] for s in seeds if not all(
        s[a]["summary"]["defined_steps"] for a in ("warm", "cold"))]  # fmt: skip
    data: dict[str, Any] = {"seeds": seeds, "steps": steps}
    cold_open = [_num(c["opens_at"]) for c in cold]
    warm_neg = [int(w["negative_steps"]) for w in warm]
    cold_neg = [int(c["negative_steps"]) for c in cold]
    warm_last = [_num(w["last"]) for w in warm]
    data.update(
        cold_opens_at=_spread(cold_open),
        cold_negative_steps=_spread(cold_neg),
        warm_negative_steps=_spread(warm_neg),
        warm_last=_spread(warm_last),
        defined_steps={a: [int(s[a]["summary"]["defined_steps"]) for s in seeds] for a in ("warm", "cold")},
    )  # fmt: skip
    measured = (
        f"same {steps} batches, {len(seeds)} seeds (mean [min, max]): cold opens at "
        f"{_sp(data['cold_opens_at'])}, negative {_sp(data['cold_negative_steps'], 1)} of "
        f"{steps} steps; warm negative {_sp(data['warm_negative_steps'], 1)} of {steps}, "
        f"last EV {_sp(data['warm_last'])}"
    )
    if campaign:
        data["campaign"] = campaign
        cw, cc = campaign["warm"]["summary"], campaign["cold"]["summary"]
        measured += (
            f". Campaigns (own batches): cold opens at {_f(_num(cc['opens_at']), 3)}, negative "
            f"{cc['negative_steps']} of {cc['steps']}; warm negative {cw['negative_steps']} of "
            f"{cw['steps']}"
        )
    if undefined:
        holds = NOT_MEASURABLE
        why = "EV undefined at every step of an arm (every batch's rewards equal) in " + ", ".join(
            undefined
        )
    elif all(n == 0 for n in warm_neg) and all(o is not None and o < 0 for o in cold_open):
        holds, why = YES, "in every seed the warm EV is never negative and the cold EV opens < 0"
    else:
        bad = [
            f"seed file {s['path']}: warm negative {w}, cold opens {_f(o, 3)}"
            for s, w, o in zip(seeds, warm_neg, cold_open, strict=True)
            if w > 0 or o is None or o >= 0
        ]
        holds, why = NO, "; ".join(bad)
    sources = [str(p) for p in paths] + (campaign.get("sources", []) if campaign else [])
    return _row("critic", "(c) critic warm-up vs cold start", measured, holds, why, sources, data)


def _spread(xs: Sequence[float | None]) -> dict[str, Any]:
    vals = [x for x in xs if x is not None]
    if not vals:
        return {"values": list(xs), "mean": None, "min": None, "max": None}
    return {"values": list(xs), "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}


def _sp(s: dict[str, Any], digits: int = 3) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def campaign_curves(warm_run: Path, cold_run: Path) -> dict[str, Any]:
    """The EV curves of two finished campaigns, each from its own ppo_step events."""
    from t1.bench.critic import _curve_record, ev_curve

    out: dict[str, Any] = {"sources": []}
    for arm, run in (("warm", warm_run), ("cold", cold_run)):
        events = [e for _, evs in step_events(run) for e in evs]
        out[arm] = _curve_record(ev_curve(events))
        out["sources"].append(str(run / "ppo" / "steps"))
    return out


# ------------------------------------------------------------------ (d) reward


def step_events(run: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """(step, its ppo_step events, the last attempt's) for every RUN/ppo/steps/step_N; an
    error names the directory with no steps or the step whose metrics.jsonl is missing/empty."""
    from t1.store.metrics_log import last_attempt, read_events

    root = Path(run) / "ppo" / "steps"
    dirs = sorted(root.glob("step_*")) if root.is_dir() else []
    if not dirs:
        raise AblationError(f"{root}: no PPO step directories (step_NNNNNN)")
    out = []
    for d in dirs:
        f = d / "train" / "metrics.jsonl"
        if not f.is_file():
            raise AblationError(f"{f}: missing (the step's ppo_step event)")
        events = last_attempt(read_events(f, "ppo_step"))
        if not events:
            raise AblationError(f"{f}: holds no ppo_step event")
        out.append((int(d.name.split("_")[1]), events))
    return out


def resolved_curve(run: Path) -> list[dict[str, Any]]:
    """Per PPO step: {"step", "resolved_rate" (None if the step logged none), "reward_mean"}."""
    out = []
    for step, events in step_events(run):
        ev = events[-1]
        out.append(
            {
                "step": step,
                "resolved_rate": _num(ev.get("resolved_rate")),
                "reward_mean": _num(ev.get("reward_mean")),
                "rows": ev.get("rows"),
            }
        )
    return out


def final_eval(path: Path) -> dict[str, Any]:
    """Overall {resolved, trajectories, resolved_rate, ci95} of an eval.json (t1 evaluate)."""
    doc = read_json(path, "t1 evaluate eval.json")
    o = _need(doc, path, "summary", "overall")
    n = int(_need(o, path, "trajectories"))
    if n == 0:
        raise AblationError(f"{path}: summary.overall.trajectories is 0 (no evaluation run)")
    return {
        "resolved": int(o["resolved"]),
        "trajectories": n,
        "resolved_rate": _num(o["resolved_rate"]),
        "ci95": o.get("ci95"),
        "source": str(path),
    }


def reward_row(dense: Path, binary: Path) -> dict[str, Any]:
    dense, binary = Path(dense), Path(binary)
    curves = {"dense": resolved_curve(dense), "binary": resolved_curve(binary)}
    ppo = {
        "dense": final_eval(dense / "eval" / "ppo" / "eval.json"),
        "binary": final_eval(binary / "eval" / "ppo" / "eval.json"),
    }
    own = binary / "eval" / "sft" / "eval.json"
    sft = final_eval(own if own.is_file() else dense / "eval" / "sft" / "eval.json")
    d, b, s = ppo["dense"], ppo["binary"], sft
    tests = {
        "binary_vs_sft": two_proportion_test(s["resolved"], s["trajectories"], b["resolved"],
                                             b["trajectories"]),
        "dense_vs_binary": two_proportion_test(b["resolved"], b["trajectories"], d["resolved"],
                                               d["trajectories"]),
    }  # fmt: skip
    data = {"curves": curves, "final": {**ppo, "sft": sft}, "tests": tests}
    last = {k: next((p["resolved_rate"] for p in reversed(v) if p["resolved_rate"] is not None),
                    None) for k, v in curves.items()}  # fmt: skip
    measured = (
        f"final eval, resolved: dense PPO {_ev(d)}, binary PPO {_ev(b)}, SFT baseline {_ev(s)}; "
        f"training rollouts over {len(curves['dense'])} / {len(curves['binary'])} steps, last "
        f"{_pct(last['dense'])} / {_pct(last['binary'])}; p(dense vs binary) "
        f"{_p(tests['dense_vs_binary'])}, p(binary vs SFT) {_p(tests['binary_vs_sft'])}"
    )
    rates = {d["resolved_rate"], b["resolved_rate"], s["resolved_rate"]}
    if len(rates) == 1:
        holds = NOT_MEASURABLE
        why = f"dense PPO, binary PPO and SFT all resolve {_pct(d['resolved_rate'])}: nothing to order"
    elif b["resolved_rate"] <= s["resolved_rate"] and d["resolved_rate"] > b["resolved_rate"]:
        holds, why = YES, "binary PPO <= SFT and dense PPO > binary PPO (point estimates)"
    else:
        holds = NO
        why = "; ".join(
            w
            for w, bad in (
                ("binary PPO above the SFT baseline", b["resolved_rate"] > s["resolved_rate"]),
                ("dense PPO not above binary PPO", d["resolved_rate"] <= b["resolved_rate"]),
            )
            if bad
        )
    sources = [str(dense / "ppo" / "steps"), str(binary / "ppo" / "steps"), d["source"],
               b["source"], s["source"]]  # fmt: skip
    return _row("reward", "(d) dense vs binary reward", measured, holds, why, sources, data)


def _ev(e: dict[str, Any]) -> str:
    return f"{_pct(e['resolved_rate'])} {_ci(e['ci95'])} ({e['resolved']}/{e['trajectories']})"


# ------------------------------------------------------------------ (e) held-out


def pool_ids(run_dir: Path, split: str) -> set[str] | None:
    """Task ids of RUN/pool/<split>/manifest.json (t1 pool), None when there is none."""
    path = Path(run_dir) / "pool" / split / "manifest.json"
    if not path.is_file():
        return None
    return {str(t["id"]) for t in read_json(path, f"t1 pool {split} manifest")["tasks"]}


def heldout_row(path: str | Path) -> dict[str, Any]:
    """From summary.json; cross-checked with the run's pool manifests where they exist: a
    held-out figure while every eval-pool task is in the train pool is not held out."""
    doc = read_json(path, "t1 report summary.json")
    held = _need(doc, path, "heldout")
    sft, ppo = held.get("sft"), held.get("ppo")
    data: dict[str, Any] = {"sft": sft, "ppo": ppo}
    run_dir = Path(path).parent
    train, evaluated = pool_ids(run_dir, "train"), pool_ids(run_dir, "eval")
    if (sft or ppo) and train is not None and evaluated is not None and evaluated <= train:
        data["pools"] = {"train": sorted(train), "eval": sorted(evaluated)}
        measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)} (as {Path(path).name} splits them)"
        why = (
            f"{path} reports a held-out split, but every task of {run_dir}/pool/eval/manifest.json "
            f"is in {run_dir}/pool/train/manifest.json: the split is not held out (are the "
            "eval records' task ids the manifest's ids?)"
        )
        return _row("heldout", "(e) SFT vs PPO, held-out", measured, NOT_MEASURABLE, why,
                    [path], data)  # fmt: skip
    if sft is None or ppo is None:
        notes = [n for n in doc.get("notes", []) if n.startswith("heldout.")]
        data["notes"] = notes
        measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)}"
        why = f"{path}: no held-out figure: " + ("; ".join(notes) or "heldout is null")
        return _row("heldout", "(e) SFT vs PPO, held-out", measured, NOT_MEASURABLE, why,
                    [path], data)  # fmt: skip
    for name, fig in (("sft", sft), ("ppo", ppo)):
        for key in ("resolved", "n", "ci95"):
            if fig.get(key) is None:
                raise AblationError(f"{path}: heldout.{name}.{key} is missing")
    xs = round(sft["resolved"] * sft["n"])
    xp = round(ppo["resolved"] * ppo["n"])
    test = two_proportion_test(xs, sft["n"], xp, ppo["n"])
    overlap = intervals_overlap(sft["ci95"], ppo["ci95"])
    data.update(test=test, intervals_overlap=overlap)
    measured = f"SFT {_fig(sft)}; PPO {_fig(ppo)}; two-proportion p {_p(test)}"
    if ppo["ci95"][0] > sft["ci95"][1]:
        holds, why = YES, "PPO's interval lies entirely above SFT's"
    else:
        side = "overlap" if overlap else "do not overlap, PPO below"
        holds, why = NO, f"the 95% intervals {side}"
    return _row("heldout", "(e) SFT vs PPO, held-out", measured, holds, why, [path], data)


def _fig(f: dict[str, Any] | None) -> str:
    if f is None:
        return "none"
    return f"{_pct(f['resolved'])} {_ci(f['ci95'])} (n {f['n']})"


# ------------------------------------------------------------------ the table


def _row(key, item, measured, holds, why, sources, data) -> dict[str, Any]:
    return {
        "key": key,
        "item": item,
        "measured": measured,
        "paper": PAPER[key],
        "shape": SHAPE[key],
        "holds": holds,
        "why": why,
        "sources": [str(s) for s in sources],
        "data": data,
    }


def build(
    run_dir: Path,
    binary: Path,
    gap: Path,
    drift: Path,
    critic: Sequence[Path],
    cold: Path | None = None,
) -> list[dict[str, Any]]:
    """The five rows, (a) to (e), from the measured files (AblationError names a bad one)."""
    run_dir = Path(run_dir)
    campaign = campaign_curves(run_dir, Path(cold)) if cold else None
    return [
        gap_row(gap),
        drift_row(drift),
        critic_row(critic, campaign),
        reward_row(run_dir, Path(binary)),
        heldout_row(run_dir / "summary.json"),
    ]


def check_filled(rows: Sequence[dict[str, Any]]) -> None:
    """Every cell of every row holds text; raises AssertionError naming the empty one."""
    for r in rows:
        for col in ("item", "measured", "paper", "shape", "holds", "why"):
            if not str(r.get(col) or "").strip():
                raise AssertionError(f"row {r.get('key')}: empty {col}")
        if r["holds"] not in (YES, NO, NOT_MEASURABLE):
            raise AssertionError(f"row {r['key']}: holds {r['holds']!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, help="the main run (dense reward, warm critic)")
    parser.add_argument("--binary", required=True, help="the binary-reward run (NAME-binary)")
    parser.add_argument("--cold", help="the cold-critic run (NAME-cold): its own EV curve too")
    parser.add_argument("--gap", required=True, help="t1 bench gap --json of the main run")
    parser.add_argument("--drift", required=True, help="t1 tito-audit --full-json of the runs")
    parser.add_argument(
        "--critic", nargs="+", required=True, help="t1 bench critic --json, one per seed"
    )
    parser.add_argument("--out", required=True, help="the Markdown table (JSON beside it)")


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        rows = build(
            Path(args.run_dir), Path(args.binary), Path(args.gap), Path(args.drift),
            [Path(p) for p in args.critic], Path(args.cold) if args.cold else None,
        )  # fmt: skip
    except (AblationError, ValueError) as e:
        print(f"t1 ablations: {e}", file=sys.stderr)
        return 2
    check_filled(rows)
    by_key = {r["key"]: r for r in rows}
    plots = [out.with_name(f"{out.stem}_critic.png"), out.with_name(f"{out.stem}_reward.png")]
    plot_critic(by_key["critic"], plots[0])
    plot_reward(by_key["reward"], plots[1])
    run_dir = Path(args.run_dir)
    text = markdown(rows, run_dir.name, [str(p) for p in plots], run_dir.parent)
    write_atomic(out, text)
    write_json_atomic(
        out.with_suffix(".json"),
        json_safe({"schema_version": SCHEMA_VERSION, "run": Path(args.run_dir).name, "rows": rows,
                "plots": [str(p) for p in plots]}),
        indent=1,
    )  # fmt: skip
    print(text)
    return 0
