"""Scripting and automation steps: command-line tools, batch renames, manifests, Makefiles,
file splitting.

    from t1.synth.steps import library; library()["scripting.manifest"]
"""

from __future__ import annotations

import hashlib
from collections import Counter

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


@register("scripting.top_words", "scripting", weight=1.2)
def top_words(ctx: StepContext):
    rng = ctx.rng
    tool = f"/app/bin/{ctx.word(ADJECTIVES)}-words"
    k = rng.randint(2, 4)
    vocab = rng.sample(WORDS, 7)

    def case() -> tuple[str, list[str]]:
        # distinct counts so that the expected order never depends on tie-breaking
        counts = rng.sample(range(1, 12), len(vocab))
        words = [w for w, c in zip(vocab, counts, strict=True) for _ in range(c)]
        rng.shuffle(words)
        text = "\n".join(" ".join(words[i : i + 6]) for i in range(0, len(words), 6)) + "\n"
        top = Counter(words).most_common(k)
        return text, [f"{w} {c}" for w, c in top]

    cases = [case() for _ in range(2)]
    script = "\n".join(
        [
            "#!/usr/bin/env python3",
            f'"""Print the {k} most frequent words of FILE as `word count`, most frequent first."""',
            "import sys",
            "from collections import Counter",
            "words = open(sys.argv[1]).read().split()",
            f"for w, c in sorted(Counter(words).items(), key=lambda x: (-x[1], x[0]))[:{k}]:",
            '    print(f"{w} {c}")',
        ]
    )
    tests = [("tool_executable", f"assert os.access({tool!r}, os.X_OK)")]
    for i, (text, want) in enumerate(cases):
        tests.append(
            (
                f"tool_case{i}",
                f"""
                p = Path("/tmp/t1_words_{i}.txt")
                p.write_text({text!r})
                r = _t1_sh([{tool!r}, str(p)])
                assert r.returncode == 0, r.stderr
                assert r.stdout.splitlines() == {want!r}
                """,
            )
        )
    return make_step(
        ctx,
        "scripting.top_words",
        f"""
        Write an executable command-line tool `{tool}` that takes one argument, a text file,
        and prints its {k} most frequent whitespace-separated words, one per line as
        `word count`, most frequent first (ties broken alphabetically). It must work from any
        directory.
        """,
        f"mkdir -p /app/bin\n{heredoc(tool, script)}chmod +x {tool}\n",
        tests,
        artifacts=[Artifact("script", tool, {"args": "FILE"})],
        mentions=[tool],
    )


@register("scripting.batch_rename", "scripting")
def batch_rename(ctx: StepContext):
    rng = ctx.rng
    inbox = f"/app/{ctx.word(NOUNS)}_inbox"
    out = f"/app/{ctx.word(NOUNS)}_sorted"
    exts = rng.sample(["txt", "log", "csv", "md", "json"], 3)
    files = []
    for i in rng.sample(range(1, 90), rng.randint(5, 9)):
        ext = rng.choice(exts)
        stem = f"{rng.choice(['Report', 'DATA', 'Note', 'Scan'])}_{i:03d}"
        files.append(
            (f"{stem}.{ext.upper() if rng.random() < 0.5 else ext}", f"{stem} {rng.random():.6f}\n")
        )
    expected = sorted(
        f"{n.rsplit('.', 1)[1].lower()}/{n.rsplit('.', 1)[0].lower()}.{n.rsplit('.', 1)[1].lower()}"
        for n, _ in files
    )
    digests = {
        f"{n.rsplit('.', 1)[1].lower()}/{n.lower()}": hashlib.sha256(c.encode()).hexdigest()
        for n, c in files
    }
    solution = "\n".join(
        [
            f"for f in {inbox}/*; do",
            '  name=$(basename "$f" | tr "A-Z" "a-z"); ext="${name##*.}"',
            f'  mkdir -p {out}/"$ext" && mv "$f" {out}/"$ext"/"$name"',
            "done",
        ]
    )
    return make_step(
        ctx,
        "scripting.batch_rename",
        f"""
        Move every file of `{inbox}` into `{out}/<ext>/<name>`, where `<name>` is the file's
        name lower-cased and `<ext>` its lower-cased extension (e.g. `Scan_001.TXT` becomes
        `{out}/txt/scan_001.txt`). Keep the contents unchanged; `{inbox}` must end up empty.
        """,
        solution,
        [
            (
                "renamed_set",
                f"""
                got = sorted(str(p.relative_to({out!r})) for p in Path({out!r}).rglob("*") if p.is_file())
                assert got == {expected!r}
                """,
            ),
            (
                "renamed_content",
                f"""
                for name, digest in {digests!r}.items():
                    assert hashlib.sha256(Path({out!r}, name).read_bytes()).hexdigest() == digest
                """,
            ),
            (
                "inbox_empty",
                f"assert Path({inbox!r}).is_dir() and not any(Path({inbox!r}).iterdir())",
            ),
        ],
        files=[EnvFile(f"{inbox}/{n}", c) for n, c in files],
        artifacts=[Artifact("dir", out, {"files": expected})],
        mentions=[inbox, out],
    )


@register("scripting.manifest", "scripting", requires=("csv", "json", "text", "pymodule", "script"))
def manifest(ctx: StepContext):
    arts = ctx.pick_files(4)
    if not arts:
        raise NotApplicable
    out = f"/app/MANIFEST_{ctx.word(NOUNS)}.sha256"
    names = sorted(rel(a.path) for a in arts)
    listing = "\n".join(f"- `{a.path}`" for a in arts)
    return make_step(
        ctx,
        "scripting.manifest",
        f"""
        Write a checksum manifest `{out}` in the format of `sha256sum` (`<hex digest>  <path>`)
        for exactly these files, with paths relative to `/app`, sorted by path:
        {listing}
        It must verify with `cd /app && sha256sum -c {rel(out)}`.
        """,
        f"cd /app && sha256sum {' '.join(names)} > {out}\n",
        [
            (
                "manifest_paths",
                f"assert [l.split(None, 1)[1].strip() for l in Path({out!r}).read_text().splitlines()] == {names!r}",
            ),
            (
                "manifest_verifies",
                f"""
                r = _t1_sh(["sha256sum", "-c", {rel(out)!r}], cwd="/app")
                assert r.returncode == 0, r.stdout + r.stderr
                """,
            ),
        ],
        artifacts=[Artifact("text", out)],
        mentions=[out, *(a.path for a in arts)],
    )


@register("scripting.makefile", "scripting")
def makefile(ctx: StepContext):
    rng = ctx.rng
    proj = f"/app/{ctx.word(NOUNS)}_docs"
    parts = sorted(rng.sample(WORDS, rng.randint(3, 5)))
    files = [
        EnvFile(f"{proj}/src/{i:02d}_{p}.txt", f"{p} {rng.randint(0, 999)}\n")
        for i, p in enumerate(parts)
    ]
    target = rng.choice(["book", "bundle", "all-pages"])
    out_name = f"{target}.txt"
    combined = "".join(f.content for f in files)
    mk = "\n".join(
        [
            f".PHONY: {target} clean",
            f"{target}: build/{out_name}",
            f"build/{out_name}: $(sort $(wildcard src/*.txt))",
            "\tmkdir -p build",
            "\tcat $^ > $@",
            "clean:",
            "\trm -rf build",
        ]
    )
    return make_step(
        ctx,
        "scripting.makefile",
        f"""
        In `{proj}`, write a `Makefile` with a target `{target}` that concatenates the files
        `src/*.txt` in name order into `build/{out_name}`, and a target `clean` that removes
        `build/`. Then run `make {target}` once so `{proj}/build/{out_name}` exists.
        """,
        f"{heredoc(proj + '/Makefile', mk)}make -C {proj} {target}\n",
        [
            (
                "make_output",
                f"assert Path({proj!r}, 'build', {out_name!r}).read_text() == {combined!r}",
            ),
            (
                "make_targets",
                f"""
                import shutil, tempfile
                tmp = Path(tempfile.mkdtemp()) / "p"
                shutil.copytree({proj!r}, tmp)
                shutil.rmtree(tmp / "build", ignore_errors=True)
                assert _t1_sh(["make", "-C", str(tmp), {target!r}]).returncode == 0
                assert (tmp / "build" / {out_name!r}).read_text() == {combined!r}
                assert _t1_sh(["make", "-C", str(tmp), "clean"]).returncode == 0
                assert not (tmp / "build").exists()
                """,
            ),
        ],
        files=files,
        artifacts=[Artifact("text", f"{proj}/build/{out_name}")],
        mentions=[proj, target, f"build/{out_name}", "clean"],
    )


@register("scripting.split_sections", "scripting")
def split_sections(ctx: StepContext):
    rng = ctx.rng
    name = ctx.word(NOUNS)
    src = f"/app/raw/{name}_notes.md"
    outdir = f"/app/{name}_sections"
    titles = rng.sample(WORDS, rng.randint(3, 5))
    body = {
        t: "\n".join(f"{rng.choice(NOUNS)} {rng.randint(1, 99)}" for _ in range(rng.randint(1, 4)))
        for t in titles
    }
    text = "".join(f"### {t}\n{b}\n" for t, b in body.items())
    expected = {f"{t}.txt": b + "\n" for t, b in body.items()}
    solution = "\n".join(
        [
            f"mkdir -p {outdir}",
            f'awk \'/^### /{{f="{outdir}/" $2 ".txt"; next}} {{print > f}}\' {src}',
        ]
    )
    return make_step(
        ctx,
        "scripting.split_sections",
        f"""
        `{src}` consists of sections, each starting with a line `### <title>`. Split it into
        one file per section, `{outdir}/<title>.txt`, holding the section's lines after its
        heading (the heading itself excluded).
        """,
        solution,
        [
            (
                "sections_set",
                f"assert sorted(p.name for p in Path({outdir!r}).iterdir()) == {sorted(expected)!r}",
            ),
            (
                "sections_content",
                f"""
                for name, text in {expected!r}.items():
                    assert Path({outdir!r}, name).read_text() == text
                """,
            ),
        ],
        files=[EnvFile(src, text)],
        artifacts=[Artifact("dir", outdir, {"files": sorted(expected)})],
        mentions=[src, outdir],
    )
