"""Building the offline tool cache (t1/sandbox/provision.py holds its layout): wheels for the
host's python3, the real uv, a flat apt repository of .debs fetched in a copy-on-write
sandbox, and the overlay layer that makes that repository apt's only source offline.

The `t1 provision` command that drives these is t1/tasks/provision.py.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import shlex
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

from t1.records import write_json_atomic
from t1.sandbox.provision import APT_SOURCE, HOST_PYTHON, INSIDE

log = logging.getLogger(__name__)


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


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
