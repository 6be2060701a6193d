"""Offline readiness: can a task run in an offline sandbox with the provision cache we have?

    t1 tasks check --offline workflow/tasks /data/tb2      (the command: t1/tasks/cli.py)

    r = readiness(load_task(dir), locate())     # Readiness: .ready, .missing, .notes
    ready, not_ready = split_ready(task_dirs, provision_dir, network="never")

A task is ready when every install its Dockerfile, verifier and solution make (read by
t1.sandbox.needs) can be served offline:

* pip spec: a wheel (or sdist) in the wheelhouse whose name and version match the spec and
  whose tags fit the host's Python (which runs every bwrap sandbox); a missing wheel for the
  image's own Python version (FROM python:3.12) is a note: it matters only for an image that
  has that interpreter (apptainer);
* apt package: installed on the host (the exact version when pinned) or in the local repo;
* uv installer: the cache holds the uv binary;
* an installer we do not provision (npm, cargo, a curl of another URL at solve/test time):
  missing, unless `sandbox.network: task` and the task sets allow_internet.

Each missing item names its source line and the `t1 provision` line that fixes it, or, when
`t1 provision --tasks` already tried and failed (recorded in the cache manifest), why it
cannot be fetched. Lines the parser could not read are notes, not blockers.
"""

from __future__ import annotations

import json
import platform
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from t1.sandbox.need_records import TaskNeeds
from t1.sandbox.needs import task_needs

NETWORK_POLICIES = ("never", "task")


@dataclass(frozen=True)
class Missing:
    item: str  # "pip pytest==8.3.3"
    source: str  # "tests/test.sh:14"
    fix: str  # the t1 provision line, or why there is none

    def __str__(self) -> str:
        return f"{self.item} ({self.source}) -> {self.fix}"


@dataclass
class Readiness:
    task: str
    path: Path
    missing: list[Missing] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.missing

    def row(self) -> dict:
        return {
            "task": self.task,
            "path": str(self.path),
            "ready": self.ready,
            "missing": [str(m) for m in self.missing],
            "notes": self.notes,
        }


# -- the wheelhouse ---------------------------------------------------------------------------


class Wheelhouse:
    """Distributions in a wheelhouse directory: name -> [(version, tags or None for sdists)]."""

    def __init__(self, root: Path):
        self.dists: dict[str, list[tuple[object, frozenset | None]]] = {}
        for p in Path(root).glob("*") if Path(root).is_dir() else []:
            try:
                if p.name.endswith(".whl"):
                    name, ver, _, tags = parse_wheel_filename(p.name)
                    self.dists.setdefault(name, []).append((ver, tags))
                elif p.name.endswith((".tar.gz", ".zip")):
                    name, ver = parse_sdist_filename(p.name)
                    self.dists.setdefault(name, []).append((ver, None))
            except (InvalidWheelFilename, InvalidSdistFilename):
                continue

    def has(self, spec: str, python: str) -> bool:
        """A distribution for `spec` that installs on Python `python` ("3.12")."""
        try:
            req = Requirement(spec)
        except InvalidRequirement:
            return False
        for ver, tags in self.dists.get(canonicalize_name(req.name), []):
            if not req.specifier.contains(ver, prereleases=True):
                continue
            if tags is None or any(_tag_fits(t, python) for t in tags):
                return True
        return False


def _tag_fits(tag, python: str) -> bool:  # noqa: ANN001 - packaging.tags.Tag
    major, minor = python.split(".")[:2]
    interp = tag.interpreter
    ok_interp = interp in (f"cp{major}{minor}", f"py{major}{minor}", f"py{major}")
    if tag.abi == "abi3" and interp.startswith(f"cp{major}"):
        ok_interp = int(interp[3:] or 0) <= int(minor)
    ok_plat = tag.platform == "any" or tag.platform.endswith(platform.machine())
    return ok_interp and ok_plat


# -- one task ---------------------------------------------------------------------------------


def readiness(
    task,  # noqa: ANN001 - t1.tasks.Task
    prov,  # noqa: ANN001 - t1.sandbox.provision.Provision | None
    network: str = "never",
    needs: TaskNeeds | None = None,
    host_apt: dict[str, str] | None = None,
) -> Readiness:
    """Readiness of `task` against the provision cache `prov` (None: there is none)."""
    from t1.sandbox.provision import HOST_PYTHON
    from t1.tasks.provision import apt_name, host_apt_versions, python_version_of, repo_debs

    tn = needs or task_needs(task)
    r = Readiness(task.id, Path(task.path))
    fix_all = f"t1 provision --tasks {shlex.quote(str(task.path))}"
    online = network == "task" and task.resources.allow_internet
    if online:
        r.notes.append("allow_internet with sandbox.network: task: the sandbox has a network")
    for i in tn.unsupported:
        if not online:
            r.missing.append(Missing(i.why, i.source, "none offline: needs a network "
                                     "(sandbox.network: task and allow_internet = true)"))  # fmt: skip
    r.notes += [f"not parsed: {i}" for i in tn.unparsed]
    if online:
        return r
    if prov is None:
        r.missing.append(Missing("the offline provision cache", "-", fix_all))
        return r
    failed = _failed(prov.root, task.id)
    host_py = python_version_of(HOST_PYTHON)
    wh = Wheelhouse(prov.root / "wheels")
    for spec in sorted({(n.spec, n.source) for n in tn.needs if n.kind == "pip"}):
        if not wh.has(spec[0], host_py):
            r.missing.append(
                Missing(f"pip {spec[0]}", spec[1], _fix(f"pip {spec[0]}", failed, fix_all))
            )
    for v in tn.python_versions():
        if v == host_py:
            continue
        from t1.sandbox.provision import image_python_dir

        if image_python_dir(prov.root, v) is None:
            r.notes.append(f"python {v}: not provisioned; the host's python3 ({host_py}) stands in")
        lacking = sorted({n.spec for n in tn.needs if n.kind == "pip" and (n.python or tn.from_python) == v
                          and not wh.has(n.spec, v)})  # fmt: skip
        if lacking:
            r.notes.append(
                f"no wheel for Python {v}: {', '.join(lacking)} (host's python3 serves bwrap)"
            )
    if any(n.kind == "uv" for n in tn.needs) and not (prov.root / "libexec" / "uv").exists():
        src = next(n.source for n in tn.needs if n.kind == "uv")
        r.missing.append(Missing("uv (installer URL)", src, "t1 provision"))
    apts = sorted({(n.spec, n.source) for n in tn.needs if n.kind == "apt"})
    host = (
        host_apt
        if host_apt is not None
        else host_apt_versions(sorted({apt_name(a)[0] for a, _ in apts}))
    )
    repo = repo_debs(prov.root / "apt" / "repo")
    for pkg, src in apts:
        name, ver = apt_name(pkg)
        if name in host and (ver is None or host[name] == ver):
            continue
        if name in repo and (ver is None or ver in repo[name]):
            continue
        r.missing.append(Missing(f"apt {pkg}", src, _fix(f"apt {pkg}", failed, fix_all)))
    return r


def _failed(root: Path, task_id: str) -> list[str]:
    try:
        rec = (
            json.loads((Path(root) / "MANIFEST.json").read_text()).get("tasks", {}).get(task_id, {})
        )
    except (OSError, json.JSONDecodeError):
        return []
    return list(rec.get("failed", []))


def _fix(item: str, failed: list[str], fix_all: str) -> str:
    for f in failed:
        if f.startswith(item + " ") or f.startswith(item + ":"):
            return f"t1 provision could not fetch it: {f.split(': ', 1)[-1]}"
    return fix_all


# -- many tasks -------------------------------------------------------------------------------


def check_dirs(
    dirs: list[str | Path], provision_dir: Path | None = None, network: str = "never"
) -> tuple[list[Readiness], list[str]]:
    """Readiness of every loadable task under `dirs`; -> (rows, load problems)."""
    from t1.sandbox.provision import locate
    from t1.tasks import TaskError, find_tasks, load_task

    prov = locate(provision_dir)
    rows, problems = [], []
    for p in find_tasks(list(dirs)):
        try:
            task = load_task(p)
        except TaskError as e:
            problems.append(str(e))
            continue
        rows.append(readiness(task, prov, network))
    return rows, problems


def split_ready(
    tasks: list,  # t1.tasks.Task
    provision_dir: Path | None = None,
    network: str = "never",
) -> tuple[list, list[Readiness]]:
    """-> (tasks that are ready, Readiness of those that are not): the pool's filter."""
    from t1.sandbox.provision import locate

    prov = locate(provision_dir)
    ready, not_ready = [], []
    for t in tasks:
        r = readiness(t, prov, network)
        (ready.append(t) if r.ready else not_ready.append(r))
    return ready, not_ready


def describe(r: Readiness) -> str:
    """`ready   id` or `NOT READY id` with one indented line per missing item (and notes)."""
    head = f"{'ready    ' if r.ready else 'NOT READY'} {r.task} ({r.path})"
    lines = [head] + [f"  missing {m}" for m in r.missing] + [f"  note    {n}" for n in r.notes]
    return "\n".join(lines)


def manifest_record(checked: int, not_ready: list[Readiness], network: str) -> dict:
    """The `offline` object of a pool manifest: how many were checked, which were excluded."""
    return {
        "network": network,
        "checked": checked,
        "ready": checked - len(not_ready),
        "not_ready_count": len(not_ready),
        "not_ready": [
            {"task": r.task, "path": str(r.path), "missing": [str(m) for m in r.missing]}
            for r in not_ready
        ],
    }
