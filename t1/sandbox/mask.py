"""Secrets mask: an overlay layer that hides host secrets and data under the system directories.

    layer = mask_layer()        # cached; ~/.cache/t1/mask/<key>/{usr,etc,var}
    # the sandbox's /etc is overlay(lowerdir=<env layer>:<provision>:layer/etc:/etc, ...)

A sandbox runs as uid 0 without capabilities, and uid 0 still holds OWNER permissions on files
the host's root owns: a host file that is `0600 root` (/etc/shadow, ssh host keys,
/etc/munge/munge.key) would be readable through a plain bind. So every file under the bound
system directories that is not world-readable is replaced in this layer (an empty file with
the same owner and mode; /etc/shadow, /etc/gshadow and their `-` backups by files synthesized
from /etc/passwd and /etc/group -- every user and group locked with `*`, no field read from the
host's shadow files -- owned root:shadow 0640 as on Debian, and written whether or not the host
has them, so `useradd`/`groupadd`/`adduser`/`passwd -l` work; the sandbox runs with the shadow
group as a supplementary group (t1.sandbox.bwrap.launch_argv): shadow-utils chown their
rewritten files to root:shadow, which a capability-less root may do only as a member), every directory that is not world-readable and searchable becomes an
empty opaque directory, and `/var` is reduced to what apt/dpkg need: `/var/lib/*` and
`/var/cache/*` keep only the entries in VAR_LIB_KEEP / VAR_CACHE_KEEP (the rest are
whited-out), logs, spools, mail and backups become empty. The layer also carries the few
files a capability-less root needs (SANDBOX_FILES: apt must not try to switch to `_apt`).

The layer is computed once per host state (key: the mtimes of /etc, /var/lib, /var/cache,
dpkg's status file and this module's MASK_VERSION) and cached; building it walks /usr, /etc
and /var (a few seconds); later sandboxes only reference it. Limits: a secret created (or a
file made private by chmod, which changes no directory mtime) after the layer was built is
not masked until the key changes; running sandboxes keep the layer they started with.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

MASK_VERSION = 4
SYSTEM_DIRS = ("usr", "etc", "var")
VAR_LIB_KEEP = {
    "apt", "dpkg", "ucf", "pam", "python", "misc", "systemd", "dbus", "sgml-base",
    "xml-core", "shells.state", "man-db", "vim", "git", "ca-certificates-java", "dictionaries-common",
    "emacsen-common", "usrmerge", "polkit-1",
}  # fmt: skip
VAR_CACHE_KEEP = {"apt", "debconf", "ldconfig", "fontconfig", "man", "adduser"}
VAR_EMPTY = {"log", "spool", "mail", "backups", "opt", "local", "tmp"}
SANITIZE = {"etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-"}
# apt's work dirs are owned by _apt with mode 0700 on the host; a capability-less root could
# not enter them, so the layer gives it empty ones it owns.
ROOT_OWNED_DIRS = {
    "var/lib/apt/lists/partial",
    "var/lib/apt/lists/auxfiles",
    "var/cache/apt/archives/partial",
}
# Files the sandbox needs because it has no capabilities (added to the layer, not masks).
SANDBOX_FILES = {
    "etc/apt/apt.conf.d/99t1-sandbox": (
        "// t1 sandbox: uid 0 without capabilities cannot switch to the _apt user\n"
        'APT::Sandbox::User "root";\n'
    ),
}


def default_cache() -> Path:
    return Path(os.environ.get("T1_CACHE", Path.home() / ".cache" / "t1")) / "mask"


def host_key(host_root: Path = Path("/")) -> str:
    h = hashlib.sha256(f"mask-v{MASK_VERSION}".encode())
    for rel in ("etc", "var/lib", "var/cache", "var/lib/dpkg/status", "usr/local", "etc/ssl"):
        try:
            h.update(f"{rel}:{(host_root / rel).stat().st_mtime_ns}".encode())
        except OSError:
            h.update(f"{rel}:-".encode())
    return h.hexdigest()[:16]


def mask_layer(cache: Path | None = None, host_root: Path = Path("/")) -> Path:
    """The cached mask layer for this host (built if missing); has usr/, etc/, var/ inside."""
    cache = cache or default_cache()
    out = cache / host_key(host_root)
    if (out / "DONE").exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        build_mask(tmp, host_root)
        (tmp / "DONE").write_text("schema_version: 1\nstatus: complete\n")
        try:
            tmp.rename(out)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Layers of earlier host states may still be lower layers of running sandboxes (removing
    # them would unmask files there): only those unused for a day are dropped.
    for old in cache.iterdir():
        if old.name != out.name and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    return out


def world_readable(st: os.stat_result) -> bool:
    """Readable (and, for a directory, searchable) by anyone: not a secret."""
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    return st.st_mode & need == need


_world_ok = world_readable


def secret_paths(host_root: Path = Path("/")) -> tuple[list[str], list[str]]:
    """(files, dirs) under the system dirs that are not world-readable, relative to the root.

    Directories are not descended into; symlinks and special files are left alone.
    """
    files: list[str] = []
    dirs: list[str] = []
    for top in SYSTEM_DIRS:
        base = host_root / top
        dev = base.stat().st_dev
        for dirpath, dirnames, filenames in os.walk(base):
            keep = []
            for d in dirnames:
                p = os.path.join(dirpath, d)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode) or st.st_dev != dev:
                    continue
                if _world_ok(st):
                    keep.append(d)
                else:
                    dirs.append(os.path.relpath(p, host_root))
            dirnames[:] = keep
            for f in filenames:
                p = os.path.join(dirpath, f)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and not _world_ok(st):
                    files.append(os.path.relpath(p, host_root))
    return files, dirs


def _copy_meta(dst: Path, st: os.stat_result) -> None:
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(dst, stat.S_IMODE(st.st_mode))


def _opaque_dir(dst: Path, st: os.stat_result | None, mode: int = 0o755) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    os.setxattr(dst, "trusted.overlay.opaque", b"y")
    if st is not None:
        _copy_meta(dst, st)
    else:
        os.chmod(dst, mode)


def _whiteout(dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(dst, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def _entries(path: Path) -> list[list[str]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    return [ln.split(":") for ln in text.splitlines() if ln.count(":") >= 3 and ln[0] != "#"]


def shadow_gid(host_root: Path = Path("/")) -> int | None:
    """The gid of group `shadow` in the host's /etc/group (None if there is none)."""
    for f in _entries(host_root / "etc/group"):
        if f[0] == "shadow" and f[2].isdigit():
            return int(f[2])
    return None


def synthesized(rel: str, host_root: Path = Path("/")) -> str:
    """/etc/shadow or /etc/gshadow (or a `-` backup) for the users and groups of /etc/passwd
    and /etc/group, every password locked (`*`); nothing is read from the host's shadow files."""
    if rel.startswith("etc/shadow"):
        day = int((host_root / "etc/passwd").stat().st_mtime // 86400)
        rows = [f"{f[0]}:*:{day}:0:99999:7:::" for f in _entries(host_root / "etc/passwd")]
    else:  # gshadow: name:password:admins:members
        rows = [f"{f[0]}:*::{f[3]}" for f in _entries(host_root / "etc/group")]
    return "".join(r + "\n" for r in rows)


def _write_shadow_files(out: Path, host_root: Path) -> None:
    gid = shadow_gid(host_root)
    for rel in sorted(SANITIZE):
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(synthesized(rel, host_root))
        os.chown(dst, 0, gid if gid is not None else 0)
        os.chmod(dst, 0o640)


def _mirror_parents(out: Path, rel: str, host_root: Path) -> None:
    """Create the parent dirs of `rel` in the layer with the host's owner and mode."""
    parts = Path(rel).parts[:-1]
    for i in range(1, len(parts) + 1):
        sub = Path(*parts[:i])
        d = out / sub
        if not d.exists():
            d.mkdir()
            try:
                _copy_meta(d, os.lstat(host_root / sub))
            except OSError:
                pass


def build_mask(out: Path, host_root: Path = Path("/")) -> None:
    """Write the mask layer for `host_root` into the empty directory `out`."""
    for rel in sorted(ROOT_OWNED_DIRS):
        if (host_root / rel).is_dir():
            _mirror_parents(out, rel, host_root)
            _opaque_dir(out / rel, None, 0o755)
    for rel, text in SANDBOX_FILES.items():
        if (host_root / rel).parent.is_dir():
            _mirror_parents(out, rel, host_root)
            (out / rel).write_text(text)
    for top in SYSTEM_DIRS:
        (out / top).mkdir(exist_ok=True)
        _copy_meta(out / top, os.lstat(host_root / top))
    var = host_root / "var"
    for name in sorted(os.listdir(var)):
        st = os.lstat(var / name)
        if name in VAR_EMPTY and stat.S_ISDIR(st.st_mode):
            _opaque_dir(out / "var" / name, st)
    for sub, keep in (("lib", VAR_LIB_KEEP), ("cache", VAR_CACHE_KEEP)):
        if (var / sub).is_dir():
            for name in sorted(os.listdir(var / sub)):
                if name not in keep:
                    _mirror_parents(out, f"var/{sub}/{name}", host_root)
                    _whiteout(out / "var" / sub / name)
    hidden = ("var/lib/", "var/cache/")
    files, dirs = secret_paths(host_root)
    for rel in dirs:
        if rel in ROOT_OWNED_DIRS:
            continue
        if rel.startswith(hidden) and Path(rel).parts[2] not in (VAR_LIB_KEEP | VAR_CACHE_KEEP):
            continue  # already whited-out
        if rel.startswith("var/") and Path(rel).parts[1] in VAR_EMPTY:
            continue
        _mirror_parents(out, rel, host_root)
        _opaque_dir(out / rel, os.lstat(host_root / rel))
    for rel in files:
        parts = Path(rel).parts
        if rel.startswith(hidden) and parts[2] not in (VAR_LIB_KEEP | VAR_CACHE_KEEP):
            continue
        if parts[0] == "var" and parts[1] in VAR_EMPTY:
            continue
        if any(rel.startswith(d + "/") for d in dirs) or any(
            rel.startswith(d + "/") for d in ROOT_OWNED_DIRS
        ):
            continue
        _mirror_parents(out, rel, host_root)
        dst = out / rel
        st = os.lstat(host_root / rel)
        if rel in SANITIZE:
            continue  # synthesized below
        dst.write_text("")
        _copy_meta(dst, st)
    if (host_root / "etc/passwd").is_file():
        _mirror_parents(out, "etc/shadow", host_root)
        _write_shadow_files(out, host_root)
