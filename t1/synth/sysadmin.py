"""System-administration steps inside the sandbox: permissions, release symlinks, backups,
service configs, a background HTTP service, disk-usage reports.

    from t1.synth.steps import library; library()["sysadmin.service"]
"""

from __future__ import annotations

import configparser
import io

from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    WORDS,
    Artifact,
    EnvFile,
    NotApplicable,
    StepContext,
    heredoc,
    make_step,
    register,
    rel,
)


@register("sysadmin.permissions", "system-administration")
def permissions(ctx: StepContext):
    rng = ctx.rng
    site = f"/app/{ctx.word(NOUNS)}_site"
    scripts = [f"{site}/bin/{w}.sh" for w in rng.sample(WORDS, rng.randint(1, 3))]
    keys = [f"{site}/secrets/{w}.key" for w in rng.sample(ADJECTIVES, rng.randint(1, 3))]
    pages = [f"{site}/public/{w}.html" for w in rng.sample(NOUNS, 2)]
    files = [EnvFile(p, "#!/bin/sh\necho ok\n", 0o644) for p in scripts]
    files += [EnvFile(p, f"{rng.getrandbits(64):016x}\n", 0o644) for p in keys]
    files += [EnvFile(p, "<html></html>\n", 0o600) for p in pages]
    want = {**{p: 0o755 for p in scripts}, **{p: 0o600 for p in keys}, **{p: 0o644 for p in pages}}
    want[f"{site}/secrets"] = 0o700
    solution = "\n".join(
        [
            f"chmod 755 {site}/bin/*.sh",
            f"chmod 700 {site}/secrets",
            f"chmod 600 {site}/secrets/*.key",
            f"chmod 644 {site}/public/*.html",
        ]
    )
    return make_step(
        ctx,
        "sysadmin.permissions",
        f"""
        Fix the permissions under `{site}`: the scripts `bin/*.sh` must be 0755, the directory
        `secrets/` 0700 and the keys `secrets/*.key` 0600, the pages `public/*.html` 0644.
        """,
        solution,
        [
            (
                "modes_scripts",
                f"assert {{p: _t1_mode(p) for p in {scripts!r}}} == {dict.fromkeys(scripts, 0o755)!r}",
            ),
            (
                "modes_secrets",
                f"assert {{p: _t1_mode(p) for p in {[*keys, f'{site}/secrets']!r}}} == { ({p: want[p] for p in [*keys, f'{site}/secrets']})!r}",
            ),
            (
                "modes_pages",
                f"assert {{p: _t1_mode(p) for p in {pages!r}}} == {dict.fromkeys(pages, 0o644)!r}",
            ),
        ],
        files=files,
        mentions=[site, "0755", "0700", "0600", "0644"],
    )


def _semver_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("."))


@register("sysadmin.release_symlink", "system-administration")
def release_symlink(ctx: StepContext):
    rng = ctx.rng
    svc = f"/app/{ctx.word(NOUNS)}_deploy"
    majors = rng.sample(range(1, 4), 2)
    versions = {
        f"v{rng.choice(majors)}.{rng.randint(0, 12)}.{rng.randint(0, 12)}" for _ in range(5)
    }
    versions |= {"v1.9.3", "v1.10.0"}
    versions = sorted(versions)
    latest = max(versions, key=_semver_key)
    files = [EnvFile(f"{svc}/releases/{v}/VERSION", v + "\n") for v in versions]
    link = f"{svc}/current"
    solution = "\n".join(
        [
            f"latest=$(ls {svc}/releases | sort -V | tail -n 1)",
            f'ln -sfn "releases/$latest" {link}',
        ]
    )
    return make_step(
        ctx,
        "sysadmin.release_symlink",
        f"""
        `{svc}/releases/` holds one directory per release version (`vMAJOR.MINOR.PATCH`).
        Create the symbolic link `{link}` pointing to the newest release by semantic-version
        order (note that `v1.10.0` is newer than `v1.9.3`).
        """,
        solution,
        [
            ("symlink_is_link", f"assert os.path.islink({link!r})"),
            (
                "symlink_target",
                f"assert os.path.realpath({link!r}) == os.path.realpath({svc + '/releases/' + latest!r})",
            ),
        ],
        files=files,
        mentions=[f"{svc}/releases/", link],
    )


@register(
    "sysadmin.backup",
    "system-administration",
    requires=("csv", "json", "text", "pymodule", "script"),
)
def backup(ctx: StepContext):
    arts = ctx.pick_files(4)
    if not arts:
        raise NotApplicable
    out = f"/app/backups/{ctx.word(NOUNS)}.tar.gz"
    names = [rel(a.path) for a in arts]
    listing = "\n".join(f"- `{a.path}`" for a in arts)
    return make_step(
        ctx,
        "sysadmin.backup",
        f"""
        Create the gzip-compressed tar archive `{out}` holding exactly these files, stored
        with paths relative to `/app` (e.g. `{names[0]}`):
        {listing}
        """,
        # fixed order, times and owners, and no gzip timestamp: the archive is reproducible
        f"mkdir -p /app/backups\ntar -C /app --sort=name --mtime=2024-01-01 --owner=0 --group=0 "
        f"--numeric-owner -cf - {' '.join(names)} | gzip -n > {out}\n",
        [
            (
                "backup_members",
                f"""
                with tarfile.open({out!r}, "r:gz") as t:
                    got = sorted(m.name.removeprefix("./") for m in t.getmembers() if m.isfile())
                assert got == {sorted(names)!r}
                """,
            ),
            (
                "backup_content",
                f"""
                with tarfile.open({out!r}, "r:gz") as t:
                    for name in {names!r}:
                        m = next(m for m in t.getmembers() if m.name.removeprefix("./") == name)
                        assert t.extractfile(m).read() == Path("/app", name).read_bytes()
                """,
            ),
        ],
        artifacts=[Artifact("archive", out, {"members": names})],
        mentions=[out, *(a.path for a in arts)],
    )


@register("sysadmin.ini_config", "system-administration")
def ini_config(ctx: StepContext):
    rng = ctx.rng
    svc = ctx.word(NOUNS)
    path = f"/app/etc/{svc}.conf"
    sections = {
        "server": {
            "host": rng.choice(["127.0.0.1", "0.0.0.0"]),
            "port": str(rng.randint(1024, 65000)),
        },
        rng.choice(["database", "storage", "cache"]): {
            "path": f"/var/lib/{svc}/{rng.choice(WORDS)}.db",
            "timeout": str(rng.randint(5, 120)),
        },
        "logging": {"level": rng.choice(["debug", "info", "warning"])},
    }
    buf = io.StringIO()
    cp = configparser.ConfigParser()
    cp.read_dict(sections)
    cp.write(buf)
    spec = "\n".join(
        f"- `[{s}]`: " + ", ".join(f"`{k} = {v}`" for k, v in kv.items())
        for s, kv in sections.items()
    )
    return make_step(
        ctx,
        "sysadmin.ini_config",
        f"""
        Write the INI configuration `{path}` with exactly these sections and keys:
        {spec}
        The file must be readable by owner and group only: mode 0640.
        """,
        f"mkdir -p /app/etc\n{heredoc(path, buf.getvalue())}chmod 640 {path}\n",
        [
            (
                "ini_values",
                f"""
                cp = configparser.ConfigParser()
                assert cp.read({path!r}) == [{path!r}]
                assert {{s: dict(cp[s]) for s in cp.sections()}} == {sections!r}
                """,
            ),
            ("ini_mode", f"assert _t1_mode({path!r}) == 0o640"),
        ],
        artifacts=[Artifact("text", path)],
        mentions=[path, "0640", *sections],
    )


@register("sysadmin.service", "system-administration", weight=0.7)
def service(ctx: StepContext):
    rng = ctx.rng
    name = ctx.word(NOUNS)
    root = f"/app/{name}_www"
    port = rng.randint(8100, 8999)
    while f"port:{port}" in ctx.used:
        port += 1
    ctx.used.add(f"port:{port}")
    token = f"{rng.choice(ADJECTIVES)}-{rng.getrandbits(32):08x}"
    pidfile = f"{root}/server.pid"
    start = f"{root}/start.sh"
    script = "\n".join(
        [
            "#!/bin/bash",
            f"cd {root}",
            f"nohup python3 -m http.server {port} --bind 127.0.0.1 --directory {root}/public > {root}/server.log 2>&1 < /dev/null &",
            f"echo $! > {pidfile}",
            f"for i in $(seq 50); do python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health.txt')\" 2>/dev/null && exit 0; sleep 0.1; done",
            "exit 1",
        ]
    )
    solution = "\n".join(
        [
            f"mkdir -p {root}/public",
            f"echo {token} > {root}/public/health.txt",
            heredoc(start, script).rstrip(),
            f"chmod +x {start}",
            start,
        ]
    )
    return make_step(
        ctx,
        "sysadmin.service",
        f"""
        Serve the directory `{root}/public` over HTTP on `127.0.0.1:{port}` with a background
        process that keeps running after your commands finish: put a file `health.txt`
        containing `{token}` in it, write the start script `{start}` (it starts the server and
        writes the server's PID to `{pidfile}`) and run it.
        """,
        solution,
        [
            ("service_pid_alive", f"pid = int(Path({pidfile!r}).read_text()); os.kill(pid, 0)"),
            (
                "service_http",
                f"""
                import urllib.request
                with urllib.request.urlopen("http://127.0.0.1:{port}/health.txt", timeout=10) as r:
                    assert r.read().decode().strip() == {token!r}
                """,
            ),
        ],
        artifacts=[Artifact("script", start)],
        mentions=[f"{root}/public", f"127.0.0.1:{port}", start, pidfile, token, "health.txt"],
    )


@register("sysadmin.disk_report", "system-administration")
def disk_report(ctx: StepContext):
    rng = ctx.rng
    d = f"/app/{ctx.word(NOUNS)}_store"
    sizes = rng.sample(range(10, 5000), rng.randint(5, 8))
    files = []
    for s in sizes:
        sub = rng.choice(["", "a/", "b/c/"])
        files.append(EnvFile(f"{d}/{sub}{rng.choice(WORDS)}_{s}.bin", "x" * s))
    rows = sorted(((len(f.content), rel(f.path)) for f in files), key=lambda r: (-r[0], r[1]))
    out = f"/app/reports/{rel(d)}_sizes.tsv"
    expected = "".join(f"{n}\t{p}\n" for n, p in rows)
    return make_step(
        ctx,
        "sysadmin.disk_report",
        f"""
        Write `{out}`: one line per regular file below `{d}`, formatted `<size in bytes><TAB>
        <path relative to /app>`, largest first (ties by path).
        """,
        f"mkdir -p /app/reports\ncd /app && find {rel(d)} -type f -printf '%s\\t%p\\n' | sort -k1,1nr -k2,2 > {out}\n",
        [
            ("sizes_lines", f"assert Path({out!r}).read_text() == {expected!r}"),
            (
                "sizes_total",
                f"assert sum(int(l.split()[0]) for l in Path({out!r}).read_text().splitlines()) == {sum(sizes)}",
            ),
        ],
        files=files,
        artifacts=[Artifact("text", out)],
        mentions=[out, d],
    )
