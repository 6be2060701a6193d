"""`t1 provision [--out DIR]`: the offline tool cache that lets verifier scripts run without network.

    t1 provision                              # -> $T1_PROVISION or ~/.cache/t1/provision
    t1 provision --out DIR --apt datamash jq --pip pytest==8.4.1 requests
    t1 provision --tasks workflow/tasks DIR...  # + what those tasks install (provision_tasks.py)
    t1 provision --tasks DIR... --build-envs bwrap --json run.json   # the campaign's localrule

Terminal-Bench verifiers install their tools at run time (`apt-get update; apt-get install -y
curl`, `curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh`, `uv add pytest==8.4.1`,
`uvx -w pytest==8.4.1 pytest ...`, `pip install pytest`). Sandboxes have no network, so this
command downloads what those calls need ONCE, while the package registries are reachable,
into a directory that every sandbox then sees read-only at /opt/t1:

    /opt/t1/wheels/      wheelhouse for the host's /usr/bin/python3: pytest (latest and the
                         commonly pinned versions), its dependencies (also the ones uv's
                         universal lock asks for: colorama, exceptiongroup, tomli), requests,
                         pytest-json-ctrf, build backends
    /opt/t1/libexec/uv   the real `uv` and `uvx` binaries, taken from the `uv` wheel
    /opt/t1/bin/uv, uvx  wrappers: a request for a Python version that is not installed
                         (`-p 3.13`) is served by the host's python3, with a note on stderr
    /opt/t1/bin/curl     shim: a URL `.../uv/install.sh` or `.../uv/<version>/install.sh`
    /opt/t1/bin/wget     prints /opt/t1/uv/install.sh (installs the provisioned uv into
                         $HOME/.local/bin and writes $HOME/.local/bin/env, like the real
                         installer; any version asked for gets the provisioned one);
                         every other URL goes to the real curl/wget
    /opt/t1/apt/repo/    a flat apt repository: the .debs that `apt-get install --download-only`
                         fetched for the requested packages (with the dependencies the host
                         lacks), `Packages`, `Packages.gz`, `Release`
    (the scripts are t1/sandbox/provision_shims.py)
    /opt/t1/image/python/bin/   `python`, `python3`, `pip`, `pip3` of FROM python:X.Y images:
                         the sandbox puts it on PATH with T1_IMAGE_PYTHON=X.Y; they run
                         /opt/t1/python/X.Y/bin/python3 when such an interpreter was placed
                         in the cache, else the host's python3 (the sandbox notes which)
    /opt/t1/layer/       an overlay layer stacked under offline sandboxes: `etc/apt/apt.conf.d/
                         99t1-offline` makes the local repo apt's only source, and
                         `var/lib/apt/lists/` holds its index, so both `apt-get update` and a
                         bare `apt-get install -y datamash` work offline

and the sandbox environment (offline sandboxes; builds with network get only PATH and the
find-links, so they can still reach the registries):

    PATH=/opt/t1/bin:...   PIP_NO_INDEX=1  PIP_FIND_LINKS=/opt/t1/wheels
    PIP_BREAK_SYSTEM_PACKAGES=1  UV_OFFLINE=1  UV_NO_INDEX=1  UV_FIND_LINKS=/opt/t1/wheels
    UV_PYTHON_DOWNLOADS=never
    (no UV_PYTHON: it would override an activated venv in `uv pip install`; with downloads
    off, uv finds the venv's or the host's /usr/bin/python3 by itself)

If the directory is missing, sandboxes still start; the log and `sandbox.notes` say that
pip/uv/apt need a network. A package that was not provisioned fails offline as it would
without network: re-run `t1 provision --apt PKG` / `--pip SPEC` to add it (downloads are
kept; the command is incremental). `MANIFEST.json` (schema_version, status) records what is
there; it is written last, so a half-built cache is never used.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from t1.records import write_json_atomic
from t1.sandbox.provision_shims import (  # noqa: F401 - re-exported: the cache's one layout
    HOST_PYTHON,
    IMAGE_PYTHON_BIN,
    INSIDE,
    image_python_dir,
    write_scripts,
)

log = logging.getLogger(__name__)

DEFAULT_PIP = [
    "pytest",
    "pytest==8.4.1",
    "pytest==8.3.5",
    "pytest==8.2.2",
    "pytest==7.4.4",
    "pytest-json-ctrf==0.3.5",
    "pytest-timeout",
    "requests",
    "colorama",
    "exceptiongroup",
    "tomli",
    "typing-extensions",
    "setuptools",
    "wheel",
    "hatchling",
]
DEFAULT_APT = ["jq", "datamash", "tree", "bc"]
APT_SOURCE = f"deb [trusted=yes] file:{INSIDE}/apt/repo ./\n"


def default_dir() -> Path:
    return Path(
        os.environ.get("T1_PROVISION", Path.home() / ".cache" / "t1" / "provision")
    ).expanduser()


@dataclass
class Provision:
    """A provisioned cache (a directory with a complete MANIFEST.json)."""

    root: Path

    @property
    def layer(self) -> Path | None:
        p = self.root / "layer"
        return p if p.is_dir() else None

    def env(self, network: bool) -> dict[str, str]:
        """Environment of a sandbox that binds this cache at /opt/t1."""
        env = {
            "PATH": f"{INSIDE}/bin",
            "T1_PROVISION": INSIDE,
            "PIP_FIND_LINKS": f"{INSIDE}/wheels",
            "UV_FIND_LINKS": f"{INSIDE}/wheels",
            "PIP_BREAK_SYSTEM_PACKAGES": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UV_PYTHON_DOWNLOADS": "never",
        }
        if not network:
            env |= {"PIP_NO_INDEX": "1", "UV_OFFLINE": "1", "UV_NO_INDEX": "1"}
        return env


def locate(path: Path | None = None) -> Provision | None:
    """The provision cache at `path` (default: $T1_PROVISION or ~/.cache/t1/provision)."""
    root = Path(path) if path is not None else default_dir()
    try:
        ok = json.loads((root / "MANIFEST.json").read_text()).get("status") == "complete"
    except (OSError, json.JSONDecodeError):
        ok = False
    return Provision(root.resolve()) if ok else None


def missing_note(path: Path | None = None) -> str:
    root = Path(path) if path is not None else default_dir()
    return (
        f"no offline provisioning at {root} (run `t1 provision`): offline sandboxes cannot "
        "install pytest/uv/apt packages, and the uv installer URL is unreachable"
    )


# -- wheels and uv ----------------------------------------------------------------------------


def download_wheels(specs: list[str], dest: Path, python: str = HOST_PYTHON) -> None:
    """`pip download` each spec (separately: pins of one package would conflict)."""
    dest.mkdir(parents=True, exist_ok=True)
    done_file = dest.parent / "wheels.done"
    done = set(done_file.read_text().split("\n")) if done_file.exists() else set()
    for spec in specs:
        if spec in done:
            continue
        log.info("wheels: %s", spec)
        cmd = [
            python,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "-d",
            str(dest),
            spec,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pip download {spec} failed:\n{r.stderr[-2000:]}")
        done.add(spec)
        done_file.write_text("\n".join(sorted(done - {""})))


def fetch_uv(out: Path, version: str | None, python: str = HOST_PYTHON) -> str:
    """Download the `uv` wheel for this host and put its binaries in out/libexec; -> version."""
    dl = out / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    spec = f"uv=={version}" if version else "uv"
    cmd = [
        python,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(dl),
        spec,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip download {spec} failed:\n{r.stderr[-2000:]}")
    wheels = sorted(dl.glob("uv-*.whl"), key=lambda p: p.stat().st_mtime)
    if version:
        wheels = [w for w in wheels if w.name.startswith(f"uv-{version}-")]
    if not wheels:
        raise RuntimeError(f"no uv wheel in {dl}")
    wheel = wheels[-1]
    libexec = out / "libexec"
    libexec.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            base = name.rsplit("/", 1)[-1]
            if ".data/scripts/" in name and base in ("uv", "uvx"):
                tmp = libexec / f".{base}.tmp"
                tmp.write_bytes(z.read(name))
                tmp.chmod(0o755)
                tmp.rename(libexec / base)
    if not (libexec / "uv").exists():
        raise RuntimeError(f"{wheel}: no uv binary inside")
    return wheel.name.split("-")[1]


# -- apt --------------------------------------------------------------------------------------


def deb_stanza(deb: Path, rel: str) -> str:
    """One `Packages` paragraph for `deb` (control fields + Filename, Size and hashes)."""
    control = subprocess.run(
        ["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    data = deb.read_bytes()
    extra = {
        "Filename": rel,
        "Size": str(len(data)),
        "MD5sum": hashlib.md5(data).hexdigest(),
        "SHA1": hashlib.sha1(data).hexdigest(),
        "SHA256": hashlib.sha256(data).hexdigest(),
    }
    lines = control.rstrip("\n").splitlines()
    return "\n".join(lines + [f"{k}: {v}" for k, v in extra.items()]) + "\n"


def write_apt_index(repo: Path) -> int:
    """Packages, Packages.gz and Release for the flat repository `repo`; -> number of debs."""
    debs = sorted(repo.glob("*.deb"))
    packages = "\n".join(deb_stanza(d, f"./{d.name}") for d in debs)
    (repo / "Packages").write_text(packages)
    with gzip.open(repo / "Packages.gz", "wt") as f:
        f.write(packages)
    sums = {"MD5Sum": hashlib.md5, "SHA256": hashlib.sha256}
    rel = ["Origin: t1-provision", "Label: t1-provision", "Suite: t1", "Codename: t1",
           f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}"]  # fmt: skip
    for field_name, fn in sums.items():
        rel.append(f"{field_name}:")
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            rel.append(f" {fn(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(rel) + "\n")
    return len(debs)


def download_debs(out: Path, packages: list[str], optional: list[str] = ()) -> list[str]:
    """Fetch `packages` and the dependencies the host lacks, in a sandbox with network.

    `optional` packages (from tasks) are fetched one by one after them; -> those that failed
    (not in the host's archive, a pinned version it no longer has). A failure of `packages`
    raises. The sandbox's COW root lets `apt-get update` refresh the lists without touching
    the host.
    """
    from t1.sandbox import SandboxSpec, open_sandbox

    repo = out / "apt" / "repo"
    (repo / "partial").mkdir(parents=True, exist_ok=True)
    spec = SandboxSpec(workdir="/repo", host_workdir=repo, network=True, provision=out / "none")
    names = " ".join(packages)
    get = (
        "apt-get install -y -q --download-only --no-install-recommends "
        "-o Dir::Cache::archives=/repo -o APT::Sandbox::User=root"
    )
    cmd = "apt-get -q update >/tmp/update.log 2>&1 || { tail -20 /tmp/update.log; exit 1; }"
    if packages:
        cmd += f"; {get} {names}"
    failed: list[str] = []
    with open_sandbox(spec) as sb:
        r = sb.exec(cmd, timeout=1800)
        if r.exit_code != 0:
            raise RuntimeError(
                f"apt download of {names} failed ({r.exit_code}):\n{r.output[-3000:]}"
            )
        for pkg in optional:
            # download-only in a throwaway root: a pinned older version is fine to fetch
            cmd = f"{get} --allow-downgrades {shlex.quote(pkg)} >/tmp/get.log 2>&1"
            r = sb.exec(cmd, timeout=1800)
            if r.exit_code != 0:
                failed.append(pkg)
                log.info("apt: %s not fetched: %s", pkg, sb.exec("tail -3 /tmp/get.log").output)
    shutil.rmtree(repo / "partial", ignore_errors=True)
    (repo / "lock").unlink(missing_ok=True)
    return failed


def build_layer(out: Path) -> None:
    """out/layer: apt config pointing at the local repo, and its lists (made offline, in a sandbox)."""
    from t1.sandbox import SandboxSpec, open_sandbox

    staging = out / ".layer-new"
    shutil.rmtree(staging, ignore_errors=True)
    conf_dir = staging / "etc" / "apt" / "apt.conf.d"
    conf_dir.mkdir(parents=True)
    apt_dir = out / "apt"
    (apt_dir / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (apt_dir / "sources.list").write_text(APT_SOURCE)
    (conf_dir / "99t1-offline").write_text(
        "// t1 provision: offline sandboxes install only from the local repo at /opt/t1/apt\n"
        f'Dir::Etc::SourceList "{INSIDE}/apt/sources.list";\n'
        f'Dir::Etc::SourceParts "{INSIDE}/apt/sources.list.d";\n'
        'Acquire::Languages "none";\n'
    )
    lists = staging / "var" / "lib" / "apt" / "lists"
    lists.mkdir(parents=True)
    # run `apt-get update` offline against the repo, in a sandbox that sees it at /opt/t1
    manifest = out / "MANIFEST.json"
    had = manifest.exists()
    if not had:
        write_json_atomic(manifest, {"partial": True})
    try:
        spec = SandboxSpec(workdir="/out", host_workdir=lists, provision=out)
        with open_sandbox(spec) as sb:
            cmd = (
                f"apt-get -q -o Dir::Etc::SourceList={INSIDE}/apt/sources.list "
                f"-o Dir::Etc::SourceParts={INSIDE}/apt/sources.list.d -o Acquire::Languages=none "
                "-o Dir::State::Lists=/out/ update && rm -rf /out/partial /out/lock /out/auxfiles"
            )
            r = sb.exec(cmd, timeout=300)
        if r.exit_code != 0:
            raise RuntimeError(f"apt-get update against the local repo failed:\n{r.output[-3000:]}")
    finally:
        if not had:
            manifest.unlink()
    old = out / "layer"
    if old.exists():
        shutil.rmtree(old)
    staging.rename(old)


# -- command ----------------------------------------------------------------------------------


def provision(
    out: Path,
    pip_specs: list[str],
    apt_packages: list[str],
    uv_version: str | None,
    tasks: list[Path] = (),
) -> dict:
    """Build or extend the cache at `out`; `tasks`: task dirs whose own needs are added too."""
    from t1.sandbox import provision_tasks as pt

    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "MANIFEST.json"
    old = {}
    if manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        if old.get("status") != "complete":
            old = {"pip": old.get("pip", []), "apt": old.get("apt", [])}
    py_version = pt.python_version_of(HOST_PYTHON)
    t0 = time.monotonic()
    pip_all = sorted(set(old.get("pip", [])) | set(pip_specs))
    apt_all = sorted(set(old.get("apt", [])) | set(apt_packages))
    download_wheels(pip_all, out / "wheels")
    items, load_errors = pt.load_needs(list(tasks)) if tasks else ([], [])
    records: dict[str, dict] = {}
    for path, tn in items:
        records[tn.task] = {"path": str(Path(path).resolve()), **tn.record()}
    for tid, rec in pt.provision_wheels(items, out / "wheels", HOST_PYTHON, py_version).items():
        records[tid].update(rec)
    # uv and the apt repo are refetched only when something new is asked of them (a cache in
    # use stays complete: the manifest is dropped only for those two, which sandboxes read)
    have_uv = old.get("uv_version") and (out / "libexec" / "uv").exists()
    uv = old["uv_version"] if have_uv and uv_version is None else fetch_uv(out, uv_version)
    write_scripts(out, py_version)
    repo = _mkdir(out / "apt" / "repo")
    apt_fetch, apt_recs = pt.apt_plan(items, repo)
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


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


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
        from t1.sandbox.provision_tasks import build_envs, load_needs

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
        from t1.sandbox.provision_tasks import summary_line

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
