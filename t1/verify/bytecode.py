"""The compartment's own Python files, compiled once per host for the interpreter that runs them.

    pycs = harness_bytecode(sources, harness_inside)   # {"harness.py": <cache>/harness.pyc, ...}

Every verifier run starts the runner, two clients and a harness under the host's python3, each
on these files copied fresh into the run's read-only harness dir, where Python can neither find
nor write a cached bytecode: every start compiled them again (~25 ms of a ~0.3 CPU-s run). Here
the host's python3 itself (`-I -S`, the interpreter the compartment runs, so the magic number
matches) compiles each file to an unchecked-hash .pyc (PEP 552) whose code objects carry the
file's path inside the compartment, so tracebacks and the harness's trust checks see
/run/t1/harness/NAME.py as before. The runner, its clients and the harness then start as
`python3 -I -S NAME.pyc`, and the harness loads its siblings' .pyc (t1.verify.harness._sibling).

Cached under ~/.cache/t1/harness-bytecode/KEY (KEY: the interpreter, its size and mtime, each
file's content, the inside dir); None when it cannot be built (the sources run as before).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from t1.sandbox.hostview import HARNESS_CACHE

CACHE = HARNESS_CACHE.parent / "harness-bytecode"
_COMPILE = (
    "import py_compile, sys\n"
    "out, inside = sys.argv[1], sys.argv[2]\n"
    "for src in sys.argv[3:]:\n"
    "    name = src.rsplit('/', 1)[-1]\n"
    "    py_compile.compile(src, cfile=f'{out}/{name[:-3]}.pyc', dfile=f'{inside}/{name}',\n"
    "        doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\n"
)
_built: dict[tuple, dict[str, Path] | None] = {}  # per process: sources' stat -> pycs


def harness_bytecode(sources: list[Path], inside: str, python: str = "/usr/bin/python3",
                     cache: Path | None = None) -> dict[str, Path] | None:  # fmt: skip
    """{source file name: its .pyc} for `sources` as the host's `python` compiles them, with
    `inside` as their directory in the compartment; None if that cannot be built."""
    py = os.path.realpath(python)
    try:  # in this process: known by the files' stat, read and hashed once (a hot path)
        seen = (inside, str(cache), *(_signature(p) for p in (py, *sources)))
        pycs = _built.get(seen, False)
        if pycs is None or (pycs and all(p.is_file() for p in pycs.values())):
            return pycs  # a failed build is not retried; a removed cache is rebuilt
        st = os.stat(py)
        h = hashlib.sha256(f"{py}\0{st.st_size}\0{st.st_mtime_ns}\0{inside}".encode())
        for src in sources:
            h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    except OSError:
        return None
    key = h.hexdigest()[:16]
    out = Path(cache or CACHE) / key
    pycs = {s.name: out / f"{s.stem}.pyc" for s in sources}
    if not all(p.is_file() for p in pycs.values()):
        tmp = out.with_name(f".{key}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            tmp.mkdir(parents=True)
            r = subprocess.run([py, "-I", "-S", "-c", _COMPILE, str(tmp), inside,
                                *map(str, sources)], capture_output=True, timeout=60)  # fmt: skip
            if r.returncode != 0:
                raise OSError(r.stderr.decode(errors="replace")[-300:])
            try:  # a directory renamed whole; another process may have built it first
                os.replace(tmp, out)
            except OSError:
                pass
        except (OSError, subprocess.SubprocessError):
            pycs = None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if pycs is not None and not all(p.is_file() for p in pycs.values()):
            pycs = None
    _built[seen] = pycs
    return pycs


def _signature(path: str | Path) -> tuple:
    st = os.stat(path)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
