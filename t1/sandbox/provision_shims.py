"""The scripts `t1 provision` writes into the cache: uv/uvx wrappers, the curl/wget shims that
serve the uv installer, the installer itself, and `python`/`pip` of FROM python:X.Y images.

    write_scripts(Path("~/.cache/t1/provision").expanduser(), "3.11")   (t1/sandbox/provision.py)

Each is a small POSIX sh script; every path in them is the cache's path inside the sandbox
(/opt/t1). They are written atomically, since a running sandbox may exec them at that moment.
"""

from __future__ import annotations

from pathlib import Path

INSIDE = "/opt/t1"
HOST_PYTHON = "/usr/bin/python3"


# -- scripts ----------------------------------------------------------------------------------


def uv_wrapper(tool: str, host_py_version: str) -> str:
    return f"""#!/bin/sh
# t1 provision: {tool} wrapper. Offline sandboxes have one interpreter, the host's python3
# ({host_py_version}); a request for another version (-p 3.13) is served by it, with a note.
pick() {{
  case "$1" in
    3|3.*|cpython-3*|python3*|py3*)
      case "$1" in {host_py_version}|{host_py_version}.*|cpython-{host_py_version}*|python{host_py_version}) echo "$1"; return;; esac
      echo "t1: python $1 is not available offline; using {HOST_PYTHON} ({host_py_version})" >&2
      echo "{HOST_PYTHON}";;
    *) echo "$1";;
  esac
}}
n=$#; i=0
while [ "$i" -lt "$n" ]; do
  a=$1; shift; i=$((i+1))
  case "$a" in
    -p|--python)
      if [ "$i" -lt "$n" ]; then v=$1; shift; i=$((i+1)); set -- "$@" "$a" "$(pick "$v")"; else set -- "$@" "$a"; fi;;
    --python=*) set -- "$@" "--python=$(pick "${{a#--python=}}")";;
    *) set -- "$@" "$a";;
  esac
done
exec {INSIDE}/libexec/{tool} "$@"
"""


INSTALL_SH = f"""#!/bin/sh
# t1 provision: offline stand-in for the uv installer script (any version asked for gets
# the provisioned uv). Honours UV_INSTALL_DIR and XDG_BIN_HOME like the real installer.
set -eu
dest="${{UV_INSTALL_DIR:-${{XDG_BIN_HOME:-$HOME/.local/bin}}}}"
mkdir -p "$dest"
ln -sf {INSIDE}/bin/uv "$dest/uv"
ln -sf {INSIDE}/bin/uvx "$dest/uvx"
cat > "$dest/env" <<EOF
#!/bin/sh
# add binaries to PATH if they aren't added yet
case ":\\${{PATH}}:" in
    *:"$dest":*) ;;
    *) export PATH="$dest:\\$PATH" ;;
esac
EOF
echo "downloading uv (t1 offline provision: $({INSIDE}/libexec/uv --version))"
echo "installing to $dest"
echo "  uv"
echo "  uvx"
echo "everything's installed!"
"""


def fetch_shim(tool: str) -> str:
    """curl/wget shim: serves the uv installer, defers every other call to the real tool."""
    out_flags = "-o|--output) out=$2; shift;; -o*) out=${1#-o};; --output=*) out=${1#--output=};;"
    if tool == "wget":
        out_flags = "-O|--output-document) out=$2; shift;; -O*) out=${1#-O};; --output-document=*) out=${1#--output-document=};; -qO*) out=${1#-qO};;"
    return f"""#!/bin/sh
# t1 provision: {tool} shim. A uv installer URL (.../uv/install.sh, .../uv/<ver>/install.sh)
# is served from {INSIDE}/uv/install.sh; everything else goes to the real {tool}.
hit=""; out=""
for a in "$@"; do
  case "$a" in
    http://*/uv/install.sh|https://*/uv/install.sh|http://*/uv/*/install.sh|https://*/uv/*/install.sh) hit=1;;
  esac
done
if [ -n "$hit" ]; then
  while [ $# -gt 0 ]; do
    case "$1" in
      {out_flags}
    esac
    shift
  done
  if [ -z "$out" ] || [ "$out" = "-" ]; then cat {INSIDE}/uv/install.sh; else cp {INSIDE}/uv/install.sh "$out"; fi
  exit 0
fi
for d in /usr/local/bin /usr/bin /bin; do
  if [ -x "$d/{tool}" ]; then exec "$d/{tool}" "$@"; fi
done
echo "{tool}: command not found" >&2
exit 127
"""


IMAGE_PYTHON_BIN = f"{INSIDE}/image/python/bin"
IMAGE_PYTHON = f"""#!/bin/sh
# t1 provision: `python`/`python3` of a FROM python:X.Y image (the sandbox sets
# T1_IMAGE_PYTHON=X.Y and puts this directory on PATH): the provisioned interpreter of that
# version when {INSIDE}/python/X.Y/bin/python3 exists, else the host's {HOST_PYTHON}.
p="{INSIDE}/python/${{T1_IMAGE_PYTHON:-none}}/bin/python3"
[ -x "$p" ] || p={HOST_PYTHON}
exec "$p" "$@"
"""
IMAGE_PIP = f"""#!/bin/sh
# t1 provision: `pip`/`pip3` of a FROM python:X.Y image: pip of the image's `python`.
exec {IMAGE_PYTHON_BIN}/python -m pip "$@"
"""


def image_python_dir(root: Path, version: str) -> Path | None:
    """The provisioned interpreter tree for Python `version` in cache `root`, if there is one."""
    d = Path(root) / "python" / version
    return d if (d / "bin" / "python3").exists() else None


def write_scripts(out: Path, host_py_version: str) -> None:
    bin_dir, uv_dir = out / "bin", out / "uv"
    img = out / IMAGE_PYTHON_BIN.removeprefix(INSIDE + "/")
    bin_dir.mkdir(exist_ok=True)
    uv_dir.mkdir(exist_ok=True)
    img.mkdir(parents=True, exist_ok=True)
    files = {
        img / "python": IMAGE_PYTHON,
        img / "python3": IMAGE_PYTHON,
        img / "pip": IMAGE_PIP,
        img / "pip3": IMAGE_PIP,
        bin_dir / "uv": uv_wrapper("uv", host_py_version),
        bin_dir / "uvx": uv_wrapper("uvx", host_py_version),
        bin_dir / "curl": fetch_shim("curl"),
        bin_dir / "wget": fetch_shim("wget"),
        uv_dir / "install.sh": INSTALL_SH,
    }
    for path, text in files.items():  # atomically: a running sandbox may exec them now
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.rename(path)
