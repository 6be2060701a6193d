"""Environment and package setup steps, all offline: virtual environments with a local library
on their path, installing a vendored wheel, `.env` files, activation scripts.

    from t1.synth.steps import library; library()["envsetup.wheel_install"]
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile

from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    WORDS,
    EnvFile,
    NotApplicable,
    StepContext,
    heredoc,
    make_step,
    register,
)


@register("envsetup.venv_path", "environment-setup")
def venv_path(ctx: StepContext):
    rng = ctx.rng
    mods = [a for a in ctx.artifacts if a.kind == "pymodule"]
    files = []
    if mods:
        art = rng.choice(mods)
        lib_dir, mod = art.path.rsplit("/", 1)
        mod = mod[:-3]
    else:
        lib = ctx.word(NOUNS)
        lib_dir, mod = f"/app/vendor/{lib}", f"{lib}_core"
        files.append(EnvFile(f"{lib_dir}/{mod}.py", f'NAME = "{mod}"\n'))
    venv = f"/app/{ctx.word(ADJECTIVES)}-venv"
    pth = f"{ctx.word(WORDS)}_local.pth"
    solution = "\n".join(
        [
            f"python3 -m venv --without-pip {venv}",
            f"site=$({venv}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')",
            f'echo {lib_dir} > "$site/{pth}"',
        ]
    )
    return make_step(
        ctx,
        "envsetup.venv_path",
        f"""
        Create a Python virtual environment at `{venv}` (no network: pip is not needed in it)
        and make the modules in `{lib_dir}` importable by its interpreter through a path file
        `{pth}` in its site-packages, so that `{venv}/bin/python -c "import {mod}"` imports
        `{lib_dir}/{mod}.py` from any directory.
        """,
        solution,
        [
            (
                "venv_prefix",
                f"""
                r = _t1_sh([{venv + "/bin/python"!r}, "-c", "import sys; print(sys.prefix)"], cwd="/tmp")
                assert r.returncode == 0, r.stderr
                assert os.path.realpath(r.stdout.strip()) == os.path.realpath({venv!r})
                """,
            ),
            (
                "venv_import",
                f"""
                r = _t1_sh([{venv + "/bin/python"!r}, "-c", "import {mod}; print({mod}.__file__)"], cwd="/tmp", env={{"PATH": "/usr/bin:/bin"}})
                assert r.returncode == 0, r.stderr
                assert os.path.realpath(r.stdout.strip()) == os.path.realpath({lib_dir + "/" + mod + ".py"!r})
                """,
            ),
            ("venv_pth", f"assert list(Path({venv!r}).glob('lib/python3*/site-packages/{pth}'))"),
        ],
        files=files,
        mentions=[venv, lib_dir, pth, mod, f"{lib_dir}/{mod}.py"],
    )


def _wheel(pkg: str, version: str, body: str) -> bytes:
    """A minimal pure-Python wheel (PEP 427) holding `pkg/__init__.py`."""
    dist = f"{pkg}-{version}.dist-info"
    files = {
        f"{pkg}/__init__.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: t1-synth\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        )
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            z.writestr(info, text)
    return buf.getvalue()


@register("envsetup.wheel_install", "environment-setup", weight=0.8)
def wheel_install(ctx: StepContext):
    rng = ctx.rng
    pkg = f"{ctx.word(ADJECTIVES)}kit"
    version = f"{rng.randint(0, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    magic = rng.randint(1000, 9999)
    body = f'__version__ = "{version}"\n\n\ndef magic():\n    return {magic}\n'
    whl = f"/app/wheels/{pkg}-{version}-py3-none-any.whl"
    target = f"/app/{ctx.word(NOUNS)}-site"
    code = f"import {pkg}; print({pkg}.__version__, {pkg}.magic())"
    return make_step(
        ctx,
        "envsetup.wheel_install",
        f"""
        There is no network. Install the package `{pkg}` from the local wheel `{whl}` into
        the directory `{target}` (as `pip install --target` would: the package and its
        `{pkg}-{version}.dist-info`), so that `PYTHONPATH={target} python3 -c "import {pkg}"`
        works.
        """,
        f"mkdir -p {target}\npython3 -m zipfile -e {whl} {target}\n",
        [
            (
                "wheel_import",
                f"""
                r = _t1_sh(["python3", "-c", {code!r}], cwd="/tmp", env={{"PATH": "/usr/bin:/bin", "PYTHONPATH": {target!r}}})
                assert r.returncode == 0, r.stderr
                assert r.stdout.split() == [{version!r}, "{magic}"]
                """,
            ),
            (
                "wheel_dist_info",
                f"assert Path({target!r}, '{pkg}-{version}.dist-info', 'METADATA').is_file()",
            ),
        ],
        files=[EnvFile(whl, base64.b64encode(_wheel(pkg, version, body)).decode(), binary=True)],
        mentions=[pkg, whl, target, f"{pkg}-{version}.dist-info"],
    )


@register("envsetup.dotenv", "environment-setup")
def dotenv(ctx: StepContext):
    rng = ctx.rng
    app = f"/app/{ctx.word(NOUNS)}_app"
    prefix = ctx.word(ADJECTIVES).upper()
    values = {
        f"{prefix}_MODE": rng.choice(["staging", "production", "test"]),
        f"{prefix}_REGION": rng.choice(["eu-west", "us-east", "ap-south"]),
        f"{prefix}_WORKERS": str(rng.randint(2, 32)),
    }
    checks = " ".join(f': "${{{k}:?{k} is not set}}"' + ";" for k in values)
    run = "\n".join(
        [
            "#!/bin/bash",
            'cd "$(dirname "$0")"',
            "set -a; [ -f .env ] && . ./.env; set +a",
            checks,
            'echo "' + " ".join(f"{k.split('_', 1)[1].lower()}=${{{k}}}" for k in values) + '"',
        ]
    )
    line = " ".join(f"{k.split('_', 1)[1].lower()}={v}" for k, v in values.items())
    env_text = "".join(f"{k}={v}\n" for k, v in values.items())
    spec = ", ".join(f"`{k}={v}`" for k, v in values.items())
    return make_step(
        ctx,
        "envsetup.dotenv",
        f"""
        `{app}/run.sh` reads its settings from `{app}/.env` (`KEY=value` lines). Create that
        file with {spec}, so that `bash {app}/run.sh` prints `{line}` even in a shell where
        none of these variables is set.
        """,
        heredoc(f"{app}/.env", env_text),
        [
            (
                "dotenv_run",
                f"""
                r = _t1_sh(["bash", "{app}/run.sh"], cwd="/tmp", env={{"PATH": "/usr/bin:/bin"}})
                assert r.returncode == 0, r.stderr
                assert r.stdout.strip() == {line!r}
                """,
            ),
            (
                "dotenv_file",
                f"assert sorted(l.split('=', 1)[0] for l in Path('{app}/.env').read_text().split()) == {sorted(values)!r}",
            ),
        ],
        files=[EnvFile(f"{app}/run.sh", run + "\n", 0o755)],
        mentions=[f"{app}/run.sh", f"{app}/.env", line, *values],
    )


@register("envsetup.activate", "environment-setup", requires=("script",))
def activate(ctx: StepContext):
    arts = [a for a in ctx.artifacts if a.kind == "script"]
    if not arts:
        raise NotApplicable
    art = ctx.rng.choice(arts)
    bindir, tool = art.path.rsplit("/", 1)
    name = ctx.word(NOUNS)
    home_var = f"{name.upper()}_HOME"
    home = f"/app/{name}_env"
    script = f'export PATH="{bindir}:$PATH"\nexport {home_var}="{home}"\n'
    probe = f"source {home}/activate.sh && command -v {tool} && echo ${home_var}"
    return make_step(
        ctx,
        "envsetup.activate",
        f"""
        Write `{home}/activate.sh` that, when sourced in bash, puts `{bindir}` at the front of
        `PATH` (so `{tool}` runs `{art.path}` by name) and exports `{home_var}={home}`.
        """,
        f"mkdir -p {home}\n{heredoc(home + '/activate.sh', script)}",
        [
            (
                "activate_path",
                f"""
                r = _t1_sh(["bash", "-c", {probe!r}], cwd="/tmp", env={{"PATH": "/usr/bin:/bin"}})
                assert r.returncode == 0, r.stderr
                assert r.stdout.split() == [{art.path!r}, {home!r}]
                """,
            ),
        ],
        mentions=[f"{home}/activate.sh", bindir, home_var, home, art.path],
    )
