"""The host's own system inside the verifier's compartment, and the harness's pytest site.

    pristine = Pristine.detect()                            # the host's loader and lib dirs
    argv = pristine.argv("/usr/bin/python3") + ["-I", "-S", ...]
    site = harness_site(provision_root, ["pytest==8.4.1", "requests"])

The compartment (t1.sandbox.compartment) binds the host's /usr and /etc read-only at
HOST_VIEW; a host binary started through `Pristine.argv` uses the host's dynamic loader and
libraries from there, never the sandbox's. `harness_site` builds, on the host, the directory
the harness imports pytest from (t1.verify.hardened starts both).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from t1.sandbox.base import SandboxError

HOST_VIEW = "/run/t1/host"  # the host's /usr and /etc, read-only, inside the compartment
HARNESS_CACHE = Path("~/.cache/t1/harness").expanduser()
_LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")


@dataclass(frozen=True)
class Pristine:
    """How to start a host binary inside the compartment without the sandbox's loader or libs."""

    loader: str  # host path of the dynamic loader (under /usr: merged-/usr hosts)
    libdirs: tuple[str, ...]

    @classmethod
    def detect(cls) -> Pristine:
        for cand in _LOADERS:
            if os.path.exists(cand):
                real = os.path.realpath(cand)
                if not real.startswith("/usr/"):
                    raise SandboxError(
                        f"the verifier needs a merged-/usr host: the loader {cand} resolves to "
                        f"{real}, outside /usr"
                    )
                return cls(real, (os.path.dirname(real), "/usr/lib"))
        raise SandboxError(
            f"no dynamic loader found on this host (looked for {', '.join(_LOADERS)})"
        )

    def argv(self, program: str) -> list[str]:
        """argv prefix running host `program` (e.g. /usr/bin/python3) from the host view."""
        real = os.path.realpath(program)
        if not real.startswith("/usr/"):
            raise SandboxError(f"{program} resolves to {real}, outside /usr")
        inside = lambda p: HOST_VIEW + p  # noqa: E731
        return [
            inside(self.loader),
            "--library-path",
            ":".join(inside(d) for d in self.libdirs),
            inside(real),
        ]


def harness_site(provision_root: Path, specs: list[str], cache: Path = HARNESS_CACHE,
                 python: Path | None = None) -> Path:  # fmt: skip
    """A directory with pytest and `specs` installed for the host's python3 (or `python`, a
    provisioned interpreter; cached by specs, interpreter and the wheelhouse's mtime).

    Built on the host by the provisioned `uv` from the provisioned wheelhouse (offline), never
    inside a sandbox, with its bytecode: the compartment binds it read-only, and each verifier
    run would otherwise compile pytest from source again (~0.25 CPU-s). Raises SandboxError
    naming the spec that is not provisioned.
    """
    specs = sorted(set(specs))
    wheels = Path(provision_root) / "wheels"
    stamp = f"{wheels.resolve()}:{wheels.stat().st_mtime_ns if wheels.is_dir() else 0}"
    py = os.path.realpath(python or "/usr/bin/python3")
    key = hashlib.sha256("\n".join([stamp, "compiled", *specs] + ([py] if python else [])).encode())
    key = key.hexdigest()[:16]
    out = Path(cache) / key
    if (out / ".done").is_file():
        return out
    uv = Path(provision_root) / "libexec" / "uv"
    if not uv.is_file():
        raise SandboxError(f"{uv}: missing (run `t1 provision`): the verifier harness needs uv")
    tmp = out.with_name(f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp")  # threads build too
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [str(uv), "pip", "install", "--offline", "--no-index", "--quiet", "--find-links",
           str(wheels), "--python", py,
           "--target", str(tmp), "--compile-bytecode", *specs]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SandboxError(
            f"cannot build the verifier harness with {' '.join(specs)} from "
            f"{provision_root}/wheels (add it with `t1 provision --pip SPEC`): "
            f"{r.stderr.strip()[-500:]}"
        )
    (tmp / ".done").write_text("\n".join(specs) + "\n")
    try:  # a directory renamed whole (t1.records replaces single files)
        os.replace(tmp, out)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
