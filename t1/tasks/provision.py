"""`t1 provision`: build or extend the offline tool cache sandboxes mount at /opt/t1 (its layout:
t1/sandbox/provision.py; the downloads: t1/sandbox/provision_build.py), and add what tasks
themselves install.

    t1 provision                                          # the defaults
    t1 provision --tasks workflow/tasks DIR...            # defaults + every task's needs
    t1 provision --tasks DIR --pip --apt                  # only the tasks' needs
    t1 provision --tasks DIR... --build-envs bwrap --json run.json   # the campaign's localrule

For each task, t1.sandbox.needs reads what its Dockerfile, verifier and solution install;
this module then adds to the cache:

* pip specs: wheels (with dependencies) for the host's python3, which serves every offline
  bwrap sandbox, and for each other Python version the task names (`FROM python:3.12-slim`,
  `uvx -p 3.13`) where a wheel exists (`pip download --python-version X.Y
  --only-binary=:all:`, into the same wheelhouse: pip and uv pick wheels by tag);
* apt packages the host does not have installed (a pinned `name=version` counts as present
  when the host has that exact version): fetched one by one into the local repo;
* uv: any installer version is served by the provisioned uv (nothing to fetch).

It is incremental (a spec already fetched for a Python version is not fetched again) and
never fatal for one task: what could not be fetched is in the task's `failed` list. Each task
gets a record in MANIFEST.json `tasks` (keyed by task id): its needs, what was fetched, what
failed, and what the parser could not read (`unparsed`) or we do not provision
(`unsupported`); `t1 tasks check --offline` reads the same needs against the cache.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from t1.records import write_json_atomic
from t1.sandbox.need_records import TaskNeeds
from t1.sandbox.needs import task_needs
from t1.sandbox.provision import DEFAULT_APT, DEFAULT_PIP, HOST_PYTHON, default_dir, write_scripts
from t1.sandbox.provision_build import (
    _mkdir,
    build_layer,
    download_debs,
    download_wheels,
    fetch_uv,
    write_apt_index,
)

log = logging.getLogger(__name__)


def load_needs(dirs: list[Path]) -> tuple[list[tuple[Path, TaskNeeds]], list[str]]:
    """Needs of every task under `dirs`; -> ([(task dir, needs)], [load errors])."""
    from t1.tasks import TaskError, find_tasks, load_task

    out, errors = [], []
    for p in find_tasks(dirs):
        try:
            out.append((p, task_needs(load_task(p))))
        except (TaskError, OSError, ValueError) as e:
            errors.append(f"{p}: {e}")
    return out, errors


def spec_pythons(tn: TaskNeeds, host: str) -> dict[str, set[str]]:
    """pip spec -> the Python versions to fetch it for (the host's always)."""
    out: dict[str, set[str]] = {}
    for n in tn.needs:
        if n.kind == "pip":
            want = n.python or tn.from_python
            out.setdefault(n.spec, {host}).update({want} if want else set())
    return out


def fetch_wheel(spec: str, dest: Path, python: str, version: str | None) -> str | None:
    """`pip download` spec (for Python `version`, wheels only; None = the host's); -> error."""
    cmd = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest)]
    if version:
        cmd += ["--only-binary=:all:", "--python-version", version]
    r = subprocess.run([*cmd, spec], capture_output=True, text=True)
    if r.returncode == 0:
        return None
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("ERROR")]
    return (lines[0] if lines else r.stderr.strip()[-300:]).removeprefix("ERROR: ")


def host_apt_versions(names: list[str]) -> dict[str, str]:
    """Installed version of each package the host has (dpkg status `install ok installed`)."""
    if not names:
        return {}
    r = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Version}\n", *names],
        capture_output=True, text=True,
    )  # fmt: skip
    out = {}
    for line in r.stdout.splitlines():
        name, status, version = (line.split("\t") + ["", ""])[:3]
        if status.endswith(" installed"):
            out[name] = version
    return out


def apt_name(pkg: str) -> tuple[str, str | None]:
    """`git=1:2.39.5-0+deb12u2` -> ("git", "1:2.39.5-0+deb12u2"); `jq:amd64` -> ("jq", None)."""
    name, _, version = pkg.partition("=")
    return name.split(":")[0], version or None


def repo_debs(repo: Path) -> dict[str, set[str]]:
    """Package name -> versions of the .debs in the local repo (from `name_version_arch.deb`)."""
    out: dict[str, set[str]] = {}
    for d in Path(repo).glob("*.deb"):
        parts = d.name[:-4].split("_")
        if len(parts) >= 2:
            out.setdefault(parts[0], set()).add(parts[1].replace("%3a", ":"))
    return out


def provision_wheels(
    items: list[tuple[Path, TaskNeeds]], wheels: Path, python: str, host: str
) -> dict[str, dict]:
    """Fetch every task's pip specs; -> per task id {"wheels": {ver: [specs]}, "failed": [...]}."""
    wheels.mkdir(parents=True, exist_ok=True)
    done_file = wheels.parent / "wheels.done"
    done = set(done_file.read_text().split("\n")) if done_file.exists() else set()
    errors: dict[str, str] = {}
    out: dict[str, dict] = {}
    for _, tn in items:
        rec = out.setdefault(tn.task, {"wheels": {}, "failed": []})
        for spec, versions in sorted(spec_pythons(tn, host).items()):
            for v in sorted(versions):
                key = spec if v == host else f"{spec} @py{v}"
                if key not in done and key not in errors:
                    log.info("wheels: %s%s", spec, "" if v == host else f" (Python {v})")
                    err = fetch_wheel(spec, wheels, python, None if v == host else v)
                    if err is None:
                        done.add(key)
                        done_file.write_text("\n".join(sorted(done - {""})))
                    else:
                        errors[key] = err
                if key in errors:
                    rec["failed"].append(f"pip {spec} (Python {v}): {errors[key]}")
                else:
                    rec["wheels"].setdefault(v, []).append(spec)
    return out


def apt_plan(items: list[tuple[Path, TaskNeeds]], repo: Path) -> tuple[list[str], dict[str, dict]]:
    """-> (packages to fetch, per task id {"apt_host": [...], "apt_repo": [...], "apt_fetch": [...]})."""
    names = sorted({apt_name(p)[0] for _, tn in items for p in tn.apt_packages()})
    host = host_apt_versions(names)
    have = repo_debs(repo)
    fetch: set[str] = set()
    out: dict[str, dict] = {}
    for _, tn in items:
        rec = out.setdefault(tn.task, {"apt_host": [], "apt_repo": [], "apt_fetch": []})
        for pkg in tn.apt_packages():
            name, version = apt_name(pkg)
            if name in host and (version is None or host[name] == version):
                rec["apt_host"].append(pkg)
            elif name in have and (version is None or version in have[name]):
                rec["apt_repo"].append(pkg)
            else:
                rec["apt_fetch"].append(pkg)
                fetch.add(pkg)
    return sorted(fetch), out


def summary_line(task: str, rec: dict) -> str:
    """One line per task for the command's output."""
    wheels = ", ".join(f"py{v} {len(s)}" for v, s in sorted(rec.get("wheels", {}).items()))
    apt = len(rec.get("apt", []))
    host = len(rec.get("apt_host", []))
    bits = [
        f"pip {len(rec.get('pip', []))}" + (f" ({wheels})" if wheels else ""),
        f"apt {apt}" + (f" ({host} on the host)" if host else ""),
        f"python {','.join(rec.get('python', [])) or '-'}",
    ]
    if rec.get("uv"):
        bits.append(f"uv {','.join(rec['uv'])} (served by the provisioned uv)")
    bad = len(rec.get("failed", [])) + len(rec.get("unsupported", []))
    state = "ok  " if not bad else "FAIL"
    line = f"{state} {task}: " + "; ".join(bits)
    for k in ("failed", "unsupported", "unparsed"):
        for item in rec.get(k, []):
            line += f"\n     {k}: {item}"
    return line


@functools.lru_cache(maxsize=8)
def python_version_of(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not re.fullmatch(r"\d+\.\d+", out):
        raise RuntimeError(f"{python}: unexpected version {out!r}")
    return out


def build_envs(
    items: list[tuple[Path, TaskNeeds]], backend: str, cache_dir: Path | None
) -> dict[str, str]:
    """Build each task's environment where the network is (bwrap layer or apptainer .sif).

    -> task id -> "built" | "cached" | "none" (nothing to build) | "error: ...". Compute jobs
    then find them in the cache (content-keyed) and never need a network to build.
    """
    from t1.sandbox.envbuild import build_env
    from t1.tasks import load_task
    from t1.tasks.env import DEFAULT_ENV_CACHE, needs_build, task_spec

    out: dict[str, str] = {}
    for path, tn in items:
        try:
            task = load_task(path)
            if backend == "apptainer":
                out[tn.task] = "built" if task_spec(task, "apptainer").image else "none"
            elif not needs_build(task):
                out[tn.task] = "none"
            else:
                env = task.environment
                cache = Path(cache_dir or DEFAULT_ENV_CACHE).expanduser()
                layer = build_env(env.dockerfile, env.context, cache)
                out[tn.task] = "cached" if layer.cached else "built"
        except Exception as e:  # noqa: BLE001 - one task's failed build is recorded, not fatal
            out[tn.task] = (
                f"error: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__}"
            )
        log.info("env %s: %s", tn.task, out[tn.task])
    return out


# -- command ----------------------------------------------------------------------------------


def provision(
    out: Path,
    pip_specs: list[str],
    apt_packages: list[str],
    uv_version: str | None,
    tasks: list[Path] = (),
) -> dict:
    """Build or extend the cache at `out`; `tasks`: task dirs whose own needs are added too."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "MANIFEST.json"
    old = {}
    if manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        if old.get("status") != "complete":
            old = {"pip": old.get("pip", []), "apt": old.get("apt", [])}
    py_version = python_version_of(HOST_PYTHON)
    t0 = time.monotonic()
    pip_all = sorted(set(old.get("pip", [])) | set(pip_specs))
    apt_all = sorted(set(old.get("apt", [])) | set(apt_packages))
    download_wheels(pip_all, out / "wheels")
    items, load_errors = load_needs(list(tasks)) if tasks else ([], [])
    records: dict[str, dict] = {}
    for path, tn in items:
        records[tn.task] = {"path": str(Path(path).resolve()), **tn.record()}
    for tid, rec in provision_wheels(items, out / "wheels", HOST_PYTHON, py_version).items():
        records[tid].update(rec)
    # uv and the apt repo are refetched only when something new is asked of them (a cache in
    # use stays complete: the manifest is dropped only for those two, which sandboxes read)
    have_uv = old.get("uv_version") and (out / "libexec" / "uv").exists()
    uv = old["uv_version"] if have_uv and uv_version is None else fetch_uv(out, uv_version)
    write_scripts(out, py_version)
    repo = _mkdir(out / "apt" / "repo")
    apt_fetch, apt_recs = apt_plan(items, repo)
    apt_fetch = [p for p in apt_fetch if p not in apt_all]
    known = old.get("apt_failed", [])
    new_apt = set(apt_all) - set(old.get("apt", [])) or set(apt_fetch) - set(known) or not old
    failed_apt = set(known) & set(apt_fetch)
    if new_apt and (apt_all or apt_fetch):
        manifest_path.unlink(missing_ok=True)  # incomplete until rewritten at the end
        failed_apt = set(download_debs(out, apt_all, optional=apt_fetch))
    for tid, rec in apt_recs.items():
        records[tid].update(rec)
        records[tid]["failed"] += [
            f"apt {p}: not fetched (see the log)" for p in rec["apt_fetch"] if p in failed_apt
        ]
    n_debs = len(list(repo.glob("*.deb")))
    if new_apt or not (out / "layer").is_dir():
        n_debs = write_apt_index(repo)
        build_layer(out)
    manifest = {
        "schema_version": 1,
        "status": "complete",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_python": f"{HOST_PYTHON} ({py_version})",
        "uv_version": uv,
        "pip": pip_all,
        "apt": apt_all,
        "wheels": sorted(p.name for p in (out / "wheels").glob("*")),
        "debs": n_debs,
        "apt_failed": sorted(failed_apt | (set(known) - set(apt_fetch))),
        "tasks": {**old.get("tasks", {}), **records},
        "task_load_errors": load_errors,
        "seconds": round(time.monotonic() - t0, 1),
    }
    write_json_atomic(manifest_path, manifest, indent=2)
    manifest["provisioned_now"] = sorted(records)
    return manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="cache dir (default: $T1_PROVISION or ~/.cache/t1/provision)",
    )
    parser.add_argument(
        "--pip", nargs="*", default=DEFAULT_PIP, help="pip requirement specs for the wheelhouse"
    )
    parser.add_argument(
        "--apt", nargs="*", default=DEFAULT_APT, help="apt packages for the local repo"
    )
    parser.add_argument(
        "--uv-version", default=None, help="uv version to provide (default: newest)"
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=[],
        type=Path,
        metavar="DIR",
        help="also provision what these tasks install (Dockerfile, verifier, solution); "
        "a DIR is a task or a directory of tasks",
    )

    parser.add_argument(
        "--build-envs",
        choices=("bwrap", "apptainer"),
        default=None,
        help="also build each task's environment (bwrap layer / apptainer .sif) here, where "
        "the network is, so that compute jobs only read the caches",
    )
    parser.add_argument(
        "--env-cache", type=Path, default=None, help="bwrap layer cache (default ~/.cache/t1/env)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="write this run's per-task records here"
    )


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = (args.out or default_dir()).expanduser().resolve()
    if os.geteuid() != 0:
        print(
            "t1 provision: the apt part runs in a copy-on-write sandbox, which needs root",
            file=sys.stderr,
        )
    try:
        m = provision(out, list(args.pip), list(args.apt), args.uv_version, list(args.tasks))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"t1 provision: {e}", file=sys.stderr)
        return 1
    envs: dict[str, str] = {}
    if args.tasks and args.build_envs:
        envs = build_envs(load_needs(list(args.tasks))[0], args.build_envs, args.env_cache)
    if args.json:
        rec = {
            "out": str(out),
            "tasks": {t: {**m["tasks"][t], "env": envs.get(t)} for t in m["provisioned_now"]},
            "task_load_errors": m["task_load_errors"],
            "seconds": m["seconds"],
        }
        write_json_atomic(args.json, rec, indent=2)
    if args.tasks:
        for tid in m["provisioned_now"]:
            env = f"\n     env ({args.build_envs}): {envs[tid]}" if tid in envs else ""
            print(summary_line(tid, m["tasks"][tid]) + env, file=sys.stderr)
        for err in m["task_load_errors"]:
            print(f"FAIL {err}", file=sys.stderr)
        bad = sum(1 for t in m["provisioned_now"] if m["tasks"][t]["failed"])
        print(
            f"t1 provision: {len(m['provisioned_now'])} tasks, {bad} with something not "
            f"fetched, {len(m['task_load_errors'])} not loadable",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {"out": str(out), **{k: m[k] for k in ("uv_version", "pip", "apt", "debs", "seconds")}},
            indent=2,
        )
    )
    return 0
