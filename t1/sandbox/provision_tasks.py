"""`t1 provision --tasks DIR...`: provision what the tasks themselves install (the task-driven part).

    t1 provision --tasks workflow/tasks /data/tb2        # defaults + every task's needs
    t1 provision --tasks DIR --pip --apt                  # only the tasks' needs

For each task, t1.sandbox.needs reads what its Dockerfile, verifier and solution install;
this module then adds to the cache (t1/sandbox/provision.py does the writing):

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

import functools
import logging
import re
import subprocess
from pathlib import Path

from t1.sandbox.needs import TaskNeeds, task_needs

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
