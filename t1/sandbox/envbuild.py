"""Environment build for bwrap: a task's Dockerfile applied as a cached copy-on-write layer.

    layer = build_env(Path("task/Dockerfile"), Path("task"), Path("~/.cache/t1/env").expanduser())
    spec = SandboxSpec(workdir=layer.workdir or "/app", env_layer=layer.path)

There is no image: `FROM` is approximated by the host root (logged). RUN, ENV, WORKDIR,
COPY (and ADD of local files), ARG and USER root are applied in a bwrap sandbox WITH network,
whose overlay upper dirs are the layer's `usr/`, `etc/`, `var/`, and whose root is the layer's
`rootfs/` (so /app, /root, /opt ... written by the build are kept). LABEL, EXPOSE, CMD,
ENTRYPOINT, VOLUME, MAINTAINER, STOPSIGNAL, HEALTHCHECK describe a container, not its files:
they are skipped with a log line. Anything else (multi-stage builds, COPY --from, ONBUILD,
SHELL, USER other than root, ADD of a URL or archive) is an error naming file and line.

The layer is keyed by a content hash of the Dockerfile, every file of the build context and
the host's package state, so a second build of the same task is a cache hit. Layout:
`<cache>/<key>/{usr,etc,var,rootfs,meta.json,build.log}`; `meta.json` records ENV and
WORKDIR (schema_version, status "complete"). A sandbox started with `env_layer=<key dir>`
stacks these upper dirs as lower layers and seeds its workdir from `rootfs/<workdir>`; it
reads the layer through t1.sandbox.layer (the format), so this builder, which runs its build
in a t1.sandbox.bwrap sandbox, is the only one of the two that imports the other.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from t1.records import write_json_atomic
from t1.sandbox.base import Limits, SandboxError, SandboxSpec
from t1.sandbox.bwrap import BwrapSandbox
from t1.sandbox.bwrap_plan import BASE_PATH, host_symlinks
from t1.sandbox.dockerfile import Instruction, from_line, image_python, parse_instructions
from t1.sandbox.layer import DIRS, META, SCHEMA_VERSION, EnvLayer, load_layer

log = logging.getLogger(__name__)

ENVBUILD_VERSION = 2  # 2: ENV ${PATH} extends the image PATH; python:X.Y builds see python, pip
SKIPPED = {
    "LABEL",
    "EXPOSE",
    "CMD",
    "ENTRYPOINT",
    "VOLUME",
    "MAINTAINER",
    "STOPSIGNAL",
    "HEALTHCHECK",
}
SUPPORTED = {"FROM", "RUN", "ENV", "WORKDIR", "COPY", "ADD", "ARG", "USER"} | SKIPPED
RUN_TIMEOUT_S = 1800.0


class EnvBuildError(SandboxError):
    """A Dockerfile cannot be applied; the message names the file and line."""


# -- parsing (pure) ---------------------------------------------------------------------------


def parse_dockerfile(text: str, source: str = "Dockerfile") -> list[Instruction]:
    """Instructions (t1.sandbox.dockerfile), each one this builder supports, else an error."""
    out = parse_instructions(text)
    for ins in out:
        if not ins.cmd:
            raise EnvBuildError(f"{source}:{ins.line}: cannot parse {ins.args[:60]!r}")
        if ins.cmd not in SUPPORTED:
            raise EnvBuildError(
                f"{source}:{ins.line}: unsupported instruction {ins.cmd} (supported: {', '.join(sorted(SUPPORTED))})"
            )
    return out


def substitute(text: str, variables: dict[str, str]) -> str:
    """Docker-style `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR:+alt}`; `\\$` stays literal."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0).startswith("\\"):
            return m.group(0)[1:]
        name = m.group(1) or m.group(2)
        op, word = m.group(3), m.group(4) or ""
        val = variables.get(name, "")
        if op == ":-":
            return val or word
        if op == ":+":
            return word if val else ""
        return val

    return re.sub(r"\\\$|\$(?:(\w+)|\{(\w+)(?:(:[-+])([^}]*))?\})", repl, text)


def parse_kv(args: str, source: str, line: int) -> dict[str, str]:
    """ENV/ARG/LABEL arguments: `K=V K2="v 2"` or legacy `K V`."""
    try:
        words = shlex.split(args, posix=True)
    except ValueError as e:
        raise EnvBuildError(f"{source}:{line}: {e}") from None
    if words and "=" not in words[0]:
        if len(words) == 1:
            return {words[0]: ""}  # ARG NAME without default
        m = re.match(r"\S+\s+(.*)", args, re.S)
        return {words[0]: m.group(1).strip() if m else ""}
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if not sep:
            out[k] = ""
            continue
        out[k] = v
    return out


def exec_form(args: str) -> list[str] | None:
    """`["a", "b"]` -> ["a", "b"]; shell form -> None."""
    if args.startswith("["):
        try:
            val = json.loads(args)
        except json.JSONDecodeError:
            return None
        if isinstance(val, list) and all(isinstance(x, str) for x in val):
            return val
    return None


def copy_args(args: str, source: str, line: int) -> tuple[list[str], str, dict[str, str]]:
    """COPY/ADD arguments -> (sources, dest, flags)."""
    words = exec_form(args) or shlex.split(args)
    flags = {}
    while words and words[0].startswith("--"):
        k, _, v = words.pop(0)[2:].partition("=")
        flags[k] = v
    if "from" in flags:
        raise EnvBuildError(f"{source}:{line}: COPY --from (multi-stage builds) is not supported")
    if len(words) < 2:
        raise EnvBuildError(f"{source}:{line}: COPY needs a source and a destination")
    return words[:-1], words[-1], flags


# -- cache key --------------------------------------------------------------------------------


def content_key(dockerfile: Path, context: Path) -> str:
    """sha256 over the Dockerfile, every file of the context (path, mode, bytes) and host state."""
    h = hashlib.sha256(f"envbuild-v{ENVBUILD_VERSION}\0".encode())
    h.update(dockerfile.read_bytes())
    for p in sorted(context.rglob("*")):
        rel = p.relative_to(context).as_posix()
        st = p.lstat()
        h.update(f"\0{rel}\0{st.st_mode:o}\0".encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    for host_state in ("/var/lib/dpkg/status", "/etc/os-release"):
        try:
            h.update(Path(host_state).read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:24]


# -- layers -----------------------------------------------------------------------------------


def build_env(
    dockerfile: Path, context: Path, cache_dir: Path, limits: Limits | None = None
) -> EnvLayer:
    """Apply `dockerfile` (build context `context`) as a layer under `cache_dir`; cached."""
    dockerfile, context, cache_dir = Path(dockerfile), Path(context), Path(cache_dir).expanduser()
    source = str(dockerfile)
    try:
        text = dockerfile.read_text()
    except OSError as e:
        raise EnvBuildError(f"{source}: cannot read: {e}") from None
    instructions = parse_dockerfile(text, source)
    key = content_key(dockerfile, context)
    out = cache_dir / key
    if (out / META).exists():
        layer = load_layer(out)
        layer.cached = True
        log.info("env build %s: cache hit %s", source, out)
        return layer
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=cache_dir))
    try:
        env, workdir = _apply(instructions, source, context, tmp, limits or Limits(memory_mb=8192))
        _tidy_rootfs(tmp / "rootfs")
        _rmtree(tmp / ".work")  # the overlays' work dirs
        meta = {
            "schema_version": SCHEMA_VERSION,
            "status": "complete",
            "key": key,
            "dockerfile": str(dockerfile.resolve()),
            "env": env,
            "workdir": workdir,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json_atomic(tmp / META, meta, indent=2)  # the directory is renamed whole below
        try:
            tmp.rename(out)
        except OSError:  # a concurrent build won
            _rmtree(tmp)
    except BaseException:
        _rmtree(tmp)
        raise
    return EnvLayer(out, env, workdir)


def _apply(
    instructions: list[Instruction], source: str, context: Path, layer: Path, limits: Limits
) -> tuple[dict[str, str], str | None]:
    for d in DIRS:
        (layer / d).mkdir()
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    workdir: str | None = None
    froms = [i for i in instructions if i.cmd == "FROM"]
    if len(froms) > 1:
        raise EnvBuildError(
            f"{source}:{froms[1].line}: multi-stage builds (a second FROM) are not supported"
        )
    blog = open(layer / "build.log", "w")  # noqa: SIM115 - closed in finally
    # python:X.Y -> python, pip (README)
    image_py = image_python(from_line(froms[0].args)) if froms else None
    spec = SandboxSpec(
        workdir="/",
        network=True,
        limits=limits,
        cow=True,
        output_cap_bytes=256 * 1024,
        env={"T1_IMAGE_PYTHON": image_py} if image_py else {},
    )
    sb = BwrapSandbox(spec, build_into=layer)
    try:
        sb.start()
        # what the base image defines: `ENV PATH=/x:${PATH}` extends the image's PATH (the
        # build sandbox's, /opt/t1 tools included, stands in for it), it does not replace it
        image_env = {"PATH": (sb.base_env or {}).get("PATH", BASE_PATH)}
        for ins in instructions:
            where = f"{source}:{ins.line}"
            variables = {**image_env, **args, **env}
            if ins.cmd == "FROM":
                msg = (
                    f"{where}: FROM {ins.args}: approximated by the host root (no image is pulled)"
                )
                log.info(msg)
                blog.write(msg + "\n")
            elif ins.cmd in SKIPPED:
                log.info("%s: %s skipped (container metadata, no files)", where, ins.cmd)
            elif ins.cmd == "ARG":
                for k, v in parse_kv(ins.args, source, ins.line).items():
                    args.setdefault(k, substitute(v, variables))
            elif ins.cmd == "ENV":
                for k, v in parse_kv(ins.args, source, ins.line).items():
                    env[k] = substitute(v, {**image_env, **args, **env})
            elif ins.cmd == "USER":
                if substitute(ins.args, variables).split(":")[0] not in ("root", "0"):
                    raise EnvBuildError(f"{where}: USER {ins.args}: only root is supported")
            elif ins.cmd == "WORKDIR":
                wd = substitute(ins.args, variables)
                workdir = wd if wd.startswith("/") else os.path.join(workdir or "/", wd)
                _run(sb, f"mkdir -p {shlex.quote(workdir)}", where, blog)
            elif ins.cmd == "RUN":
                form = exec_form(ins.args)
                cmd = shlex.join(form) if form else ins.args
                exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**args, **env}.items())
                line = f"cd {shlex.quote(workdir or '/')} && env {exports} /bin/sh -c {shlex.quote(cmd)}"
                _run(sb, line, where, blog)
            elif ins.cmd in ("COPY", "ADD"):
                _copy(sb, ins, source, context, workdir, variables, blog)
        return env, workdir
    finally:
        blog.close()
        sb.stop()


def _run(sb, cmd: str, where: str, blog) -> None:  # noqa: ANN001 - BwrapSandbox, file
    blog.write(f"$ {cmd}\n")
    r = sb.exec(cmd, timeout=RUN_TIMEOUT_S)
    blog.write(r.output)
    blog.flush()
    if r.exit_code != 0:
        raise EnvBuildError(f"{where}: failed with exit code {r.exit_code}:\n{r.output[-3000:]}")


def _copy(
    sb, ins: Instruction, source: str, context: Path, workdir: str | None, variables, blog
) -> None:  # noqa: ANN001
    where = f"{source}:{ins.line}"
    srcs, dest, flags = copy_args(ins.args, source, ins.line)
    dest = substitute(dest, variables)
    if not dest.startswith("/"):
        dest = os.path.join(workdir or "/", dest)
    matched: list[Path] = []
    for s in srcs:
        s = substitute(s, variables)
        if ins.cmd == "ADD" and re.match(r"\w+://", s):
            raise EnvBuildError(f"{where}: ADD of a URL is not supported; use RUN curl")
        hits = (
            sorted(glob.glob(str(context / s)))
            if any(c in s for c in "*?[")
            else [str(context / s)]
        )
        for h in hits:
            p = Path(h)
            if not p.exists():
                raise EnvBuildError(
                    f"{where}: COPY source {s!r} not found in the context {context}"
                )
            if not p.resolve().is_relative_to(context.resolve()):
                raise EnvBuildError(f"{where}: COPY source {s!r} lies outside the context")
            if ins.cmd == "ADD" and p.is_file() and re.search(r"\.(tar|tgz|tar\.\w+)$", p.name):
                raise EnvBuildError(f"{where}: ADD of an archive (auto-extract) is not supported")
            matched.append(p)
    into_dir = dest.endswith("/") or len(matched) > 1
    for p in matched:
        if p.is_dir():
            target = dest  # a directory's contents go into dest
            sb.put(p, target)
        else:
            target = os.path.join(dest, p.name) if into_dir else dest
            sb.put(p, target)
        blog.write(f"COPY {p} -> {target}\n")
        if flags.get("chown"):
            _run(sb, f"chown -R {shlex.quote(flags['chown'])} {shlex.quote(target)}", where, blog)
        if flags.get("chmod"):
            _run(sb, f"chmod -R {shlex.quote(flags['chmod'])} {shlex.quote(target)}", where, blog)


def _tidy_rootfs(rootfs: Path) -> None:
    """Drop the mount points and symlinks bwrap created in the build's root."""
    for name, target in host_symlinks().items():
        p = rootfs / name
        if p.is_symlink() and os.readlink(p) == target:
            p.unlink()
    for rel in (
        "run/t1/stage",
        "run/t1",
        "opt/t1",
        "usr",
        "etc",
        "var",
        "dev",
        "proc",
        "tmp",
        "run",
        "logs",
        "opt",
        "home",
        "sys",
    ):
        p = rootfs / rel
        try:
            p.rmdir()  # only if empty
        except OSError:
            pass


def _rmtree(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)
