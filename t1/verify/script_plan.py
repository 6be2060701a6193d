"""The harness dir of a pytest verifier: the runner's config, its shims, its exec-only loader.

    sites = prepare_runner(harness_dir, task, tests_dir, pristine, provision, specs, proxy=True)
    run_compartment(..., argv=runner_argv(pristine), site_dir=sites)

Written on the host into the per-run harness dir (bound read-only at /run/t1/harness):
runner.json (what t1.verify.script_runner reads), prelude.sh (the BASH_ENV of the script's
bash: functions pytest, py.test, python, python3, uv, uvx calling the runner's client under
the host's python), bin/ (the same as shims, first on PATH), ld.so (a copy of the host's
dynamic loader with mode 0111: a process exec'd through it cannot read it, so the kernel
makes it non-dumpable from the exec on; the runner and every harness run start by it).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from t1.tasks.model import Task
from t1.verify.in_shell import TESTS_DIR

TOOLS = ("pytest", "py.test", "python", "python3", "uv", "uvx")
RUNNER = "script_runner.py"
# `python3 -c 'import pytest'`, the probe of a verifier script that installs pytest when it is
# missing (t1.tasks.runner's test.sh does, as many real tasks' scripts): in the compartment every
# `python3 -m pytest` is served by the harness, whatever the image's python has, so the probe
# answers yes in bash. It spared the run two interpreter starts (the runner's client and the
# image's python3, which lacks pytest) and the wheelhouse lookup that followed the "no": about a
# tenth of a verifier run's CPU (LOG.md, 2026-12-06).
PROBE = (
    '_t1_probe() { [ $# -eq 3 ] && [ "$2" = -c ] && [ "$3" = \'import pytest\' ] && '
    'case "$1" in python|python3|python3.*) true ;; *) false ;; esac; }\n'
)


def _inside(harness_inside: str, name: str) -> str:
    return f"{harness_inside}/{name}"


def _entry(name: str, bytecode: bool) -> str:
    """NAME.py, or its compiled NAME.pyc (t1.verify.bytecode) shipped beside it."""
    return f"{name[:-3]}.pyc" if bytecode else name


def runner_argv(pristine, harness_inside: str, bytecode: bool = False) -> list[str]:
    """The compartment's first process: the runner under the host's python3, by the
    exec-only loader copy."""
    from t1.sandbox.hostview import HOST_VIEW

    return [
        _inside(harness_inside, "ld.so"),
        "--library-path",
        ":".join(HOST_VIEW + d for d in pristine.libdirs),
        HOST_VIEW + os.path.realpath("/usr/bin/python3"),
        "-I", "-S", _inside(harness_inside, _entry(RUNNER, bytecode)), "--fd", "{fd}",
        "--config", _inside(harness_inside, "runner.json"),
    ]  # fmt: skip


def prepare_runner(harness: Path, task: Task, tests_dir: Path, pristine, prov, specs: list[str],
                   ini: str, tail: list[str], proxy: bool, harness_inside: str,
                   tmp_inside: str, fallback: list[str] = (),
                   bytecode: bool = False) -> dict[str, Path]:  # fmt: skip
    """Write the runner's files into `harness` (see the module); the sites to bind
    ({name under the harness dir: host dir}): `site` for the host's python3, `site-X.Y` for
    each provisioned interpreter the script asks for."""
    from t1.sandbox.hostview import HOST_VIEW, harness_site
    from t1.sandbox.provision import INSIDE, image_python_dir
    from t1.verify.pytest_plan import script_pip_and_pythons

    loader = harness / "ld.so"
    shutil.copyfile(pristine.loader, loader)
    loader.chmod(0o111)
    libs = ":".join(HOST_VIEW + d for d in pristine.libdirs)
    host_py = HOST_VIEW + os.path.realpath("/usr/bin/python3")
    sites = {"site": harness_site(prov.root, specs)}
    pythons = {}
    script = task.verifier.script
    text = script.read_text(errors="replace") if script is not None and script.is_file() else ""
    for ver in script_pip_and_pythons(text)[1]:
        tree = image_python_dir(prov.root, ver)
        if tree is None:
            continue
        sites[f"site-{ver}"] = harness_site(prov.root, specs, python=tree / "bin" / "python3")
        pythons[ver] = {
            "python": f"{INSIDE}/python/{ver}/bin/python3",
            "site": _inside(harness_inside, f"site-{ver}"),
        }
    name = "run-tests.sh" if task.layout == "v1" else task.verifier.script.name
    bash = pristine.argv("/usr/bin/bash") + ["--noprofile", "--norc"]
    cfg = {
        "prefix": [_inside(harness_inside, "ld.so"), "--library-path", libs],
        "python": host_py,
        "site": _inside(harness_inside, "site"),
        "pythons": pythons,
        "harness": _inside(harness_inside, _entry("harness.py", bytecode)),
        "tests": TESTS_DIR,
        "ini": ini,
        "tail": tail,
        "proxy": proxy,
        "tmp": tmp_inside,
        "bash": bash,
        "script": f"{TESTS_DIR}/{name}",
        # the test files the script names: run by the harness after the script when the script
        # called pytest only in forms no shim intercepts (e.g. "/usr/bin/python3 -m pytest")
        "fallback": list(fallback),
    }
    (harness / "runner.json").write_text(json.dumps(cfg, indent=1))
    client = " ".join(
        shlex.quote(x)
        for x in [
            *pristine.argv("/usr/bin/python3"),
            "-I",
            "-S",
            _inside(harness_inside, _entry(RUNNER, bytecode)),
            "call",
        ]  # fmt: skip
    )
    fns = "".join(f'{t}() {{ _t1_call {t} "$@"; }}\n' for t in TOOLS)
    (harness / "prelude.sh").write_text(
        "# t1: the script's pytest calls go to the verifier's harness (t1.verify.script_runner)\n"
        f"{PROBE}"
        f'_t1_call() {{ _t1_probe "$@" && return 0; {client} "$@"; }}\n{fns}'
        f"export -f _t1_call {' '.join(TOOLS)}\nunset BASH_ENV\n"
    )
    bin_dir = harness / "bin"
    bin_dir.mkdir(exist_ok=True)
    for t in TOOLS:
        (bin_dir / t).write_text(f'#!/bin/sh\nexec {client} {t} "$@"\n')
        (bin_dir / t).chmod(0o755)
    return sites
