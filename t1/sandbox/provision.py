"""The offline tool cache that lets verifier scripts run without network: its layout, and
finding it (`locate`), which every sandbox does at start. Building it is
t1/sandbox/provision_build.py; the `t1 provision` command (and what tasks add to it) is
t1/tasks/provision.py:

    t1 provision                              # -> $T1_PROVISION or ~/.cache/t1/provision
    t1 provision --out DIR --apt datamash jq --pip pytest==8.4.1 requests
    t1 provision --tasks workflow/tasks DIR...  # + what those tasks install
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

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

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
    manifest = root / "MANIFEST.json"
    try:
        st = manifest.stat()
        key = (str(manifest), st.st_mtime_ns, st.st_size)
        ok = _COMPLETE.get(key)
        if ok is None:  # read once per version: every sandbox and verifier run asks
            ok = _COMPLETE[key] = json.loads(manifest.read_text()).get("status") == "complete"
    except (OSError, json.JSONDecodeError):
        ok = False
    return Provision(root.resolve()) if ok else None


_COMPLETE: dict[tuple[str, int, int], bool] = {}


def missing_note(path: Path | None = None) -> str:
    root = Path(path) if path is not None else default_dir()
    return (
        f"no offline provisioning at {root} (run `t1 provision`): offline sandboxes cannot "
        "install pytest/uv/apt packages, and the uv installer URL is unreachable"
    )
