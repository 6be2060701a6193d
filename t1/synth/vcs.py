"""Version-control steps with git: put earlier work under version control, branch and tag,
merge, ignore rules, apply a patch.

    from t1.synth.steps import library; library()["vcs.branch_tag"]

The reference solution fixes GIT_AUTHOR_DATE / GIT_COMMITTER_DATE (t1.synth.draft), so commit
ids are deterministic. Assertions are monotone (a commit with message M exists and its tree
holds F), so later git steps cannot break them.
"""

from __future__ import annotations

from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    PEOPLE,
    WORDS,
    Artifact,
    EnvFile,
    StepContext,
    email_of,
    heredoc,
    make_step,
    register,
    rel,
)


def _git(repo: str, person: str) -> str:
    return f"git -C {repo} -c user.name='{person}' -c user.email={email_of(person)}"


def _find_commit_test(repo: str, msg: str, path: str, content: str | None) -> str:
    """Test body: some commit reachable from any ref has subject `msg` and `path` in its tree."""
    lines = [
        f'log = _t1_git({repo!r}, "log", "--all", "--format=%H %s").stdout.splitlines()',
        f'shas = [l.split(" ", 1)[0] for l in log if l.split(" ", 1)[1:] == [{msg!r}]]',
        'assert shas, "no commit with that message"',
        "sha = shas[0]",
        f'assert _t1_git({repo!r}, "cat-file", "-e", f"{{sha}}:{path}").returncode == 0',
    ]
    if content is not None:
        lines.append(f'assert _t1_git({repo!r}, "show", f"{{sha}}:{path}").stdout == {content!r}')
    return "\n".join(lines)


@register("vcs.init_commit", "version-control", weight=1.3)
def init_commit(ctx: StepContext):
    rng = ctx.rng
    repo = f"/app/{ctx.word(NOUNS)}-repo"
    person = rng.choice(PEOPLE)
    arts = ctx.pick_files(3)
    files: list[EnvFile] = []
    if arts:
        tracked = [(rel(a.path), a.path) for a in arts]
    else:
        files = [
            EnvFile(f"/app/drafts/{w}.md", f"# {w}\n\n{rng.choice(NOUNS)} {rng.randint(1, 99)}\n")
            for w in rng.sample(WORDS, 2)
        ]
        tracked = [(rel(f.path), f.path) for f in files]
    msg = f"Import {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    copy = "\n".join(f"mkdir -p $(dirname {repo}/{r}) && cp {src} {repo}/{r}" for r, src in tracked)
    listing = "\n".join(f"- `{src}` as `{r}`" for r, src in tracked)
    solution = "\n".join(
        [
            f"git init -q -b main {repo}",
            copy,
            f"git -C {repo} add -A",
            f"{_git(repo, person)} commit -q -m '{msg}'",
        ]
    )
    tests = [
        ("git_root_commit", _find_commit_test(repo, msg, tracked[0][0], None)),
        (
            "git_author",
            f"""
            log = _t1_git({repo!r}, "log", "--all", "--format=%s|%an|%ae").stdout.splitlines()
            assert {f"{msg}|{person}|{email_of(person)}"!r} in log
            """,
        ),
        (
            "git_files",
            f"""
            for path, src in {tracked!r}:
                assert _t1_git({repo!r}, "show", f"main:{{path}}").stdout == Path(src).read_text()
            """,
        ),
    ]
    return make_step(
        ctx,
        "vcs.init_commit",
        f"""
        Create a git repository at `{repo}` whose default branch is `main`, copy these files
        into it (same relative paths):
        {listing}
        and commit them with the message `{msg}`, author `{person} <{email_of(person)}>`.
        """,
        solution,
        tests,
        files=files,
        artifacts=[
            Artifact(
                "gitrepo",
                repo,
                {"branch": "main", "files": [r for r, _ in tracked], "person": person},
            )
        ],
        mentions=[repo, msg, person, email_of(person), "main", *(s for _, s in tracked)],
    )


@register("vcs.branch_tag", "version-control", requires=("gitrepo",))
def branch_tag(ctx: StepContext):
    rng = ctx.rng
    art = ctx.pick("gitrepo")
    repo, person = art.path, art.meta["person"]
    branch = f"feature/{ctx.word(WORDS)}"
    note = f"notes/{ctx.word(NOUNS)}.md"
    content = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.randint(1, 999)}\n"
    tag = f"v{rng.randint(0, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}-{ctx.word(ADJECTIVES)}"
    msg = f"Add {note}"
    solution = "\n".join(
        [
            f"git -C {repo} checkout -q -b {branch} main",
            f"mkdir -p $(dirname {repo}/{note})",
            heredoc(f"{repo}/{note}", content).rstrip(),
            f"git -C {repo} add {note}",
            f"{_git(repo, person)} commit -q -m '{msg}'",
            f"{_git(repo, person)} tag -a {tag} -m 'Release {tag}'",
            f"git -C {repo} checkout -q main",
        ]
    )
    return make_step(
        ctx,
        "vcs.branch_tag",
        f"""
        In `{repo}`, create a branch `{branch}` from `main`, add the file `{note}` containing
        the line `{content.strip()}`, commit it with the message `{msg}`, put the annotated tag
        `{tag}` on that commit, and switch back to `main`.
        """,
        solution,
        [
            ("branch_commit", _find_commit_test(repo, msg, note, content)),
            (
                "tag_annotated",
                f"""
                assert _t1_git({repo!r}, "cat-file", "-t", {tag!r}).stdout.strip() == "tag"
                assert _t1_git({repo!r}, "show", "{tag}:{note}").stdout == {content!r}
                """,
            ),
            (
                "branch_exists",
                f"assert _t1_git({repo!r}, 'rev-parse', '--verify', '-q', {'refs/heads/' + branch!r}).returncode == 0",
            ),
        ],
        mentions=[repo, branch, note, content.strip(), msg, tag, "main"],
    )


@register("vcs.merge", "version-control", requires=("gitrepo",))
def merge(ctx: StepContext):
    rng = ctx.rng
    art = ctx.pick("gitrepo")
    repo, person = art.path, art.meta["person"]
    branch = f"topic/{ctx.word(WORDS)}"
    path = f"docs/{ctx.word(NOUNS)}.txt"
    content = "".join(f"{rng.choice(WORDS)} {rng.randint(0, 99)}\n" for _ in range(3))
    c_msg = f"Write {path}"
    m_msg = f"Merge {branch} into main"
    solution = "\n".join(
        [
            f"git -C {repo} checkout -q -b {branch} main",
            f"mkdir -p {repo}/docs",
            heredoc(f"{repo}/{path}", content).rstrip(),
            f"git -C {repo} add {path}",
            f"{_git(repo, person)} commit -q -m '{c_msg}'",
            f"git -C {repo} checkout -q main",
            f"{_git(repo, person)} merge -q --no-ff {branch} -m '{m_msg}'",
        ]
    )
    return make_step(
        ctx,
        "vcs.merge",
        f"""
        In `{repo}`, on a new branch `{branch}` (from `main`), add `{path}` with this content
        and commit it with the message `{c_msg}`:
        ```
        {content.rstrip()}
        ```
        Then merge `{branch}` into `main` with a merge commit (no fast-forward) whose message
        is `{m_msg}`.
        """,
        solution,
        [
            ("merge_topic_commit", _find_commit_test(repo, c_msg, path, content)),
            (
                "merge_commit",
                f"""
                log = _t1_git({repo!r}, "log", "main", "--merges", "--format=%P|%s").stdout.splitlines()
                mine = [l for l in log if l.split("|", 1)[1] == {m_msg!r}]
                assert mine and len(mine[0].split("|")[0].split()) == 2
                assert _t1_git({repo!r}, "cat-file", "-e", "main:{path}").returncode == 0
                """,
            ),
        ],
        mentions=[repo, branch, path, c_msg, m_msg, "main"],
    )


@register("vcs.gitignore", "version-control", requires=("gitrepo",))
def gitignore(ctx: StepContext):
    art = ctx.pick("gitrepo")
    repo, person = art.path, art.meta["person"]
    ext = ctx.rng.choice(["log", "tmp", "bak", "cache"])
    d = f"{ctx.word(WORDS)}_build"
    msg = f"Ignore *.{ext} and {d}/"
    probes = [f"x.{ext}", f"sub/y.{ext}", f"{d}/out.txt"]
    solution = "\n".join(
        [
            f"printf '%s\\n' '*.{ext}' '{d}/' >> {repo}/.gitignore",
            f"git -C {repo} add .gitignore",
            f"{_git(repo, person)} commit -q -m '{msg}'",
        ]
    )
    return make_step(
        ctx,
        "vcs.gitignore",
        f"""
        In `{repo}`, make git ignore every `*.{ext}` file and the directory `{d}/` through
        `.gitignore` (keep any rules already there), and commit that with the message
        `{msg}` on `main`.
        """,
        solution,
        [
            (
                "ignore_rules",
                f"""
                for p in {probes!r}:
                    assert _t1_git({repo!r}, "check-ignore", "-q", "--no-index", p).returncode == 0, p
                """,
            ),
            ("ignore_committed", _find_commit_test(repo, msg, ".gitignore", None)),
        ],
        mentions=[repo, f"*.{ext}", f"{d}/", msg, ".gitignore"],
    )


@register("vcs.apply_patch", "version-control", requires=("gitrepo",))
def apply_patch(ctx: StepContext):
    rng = ctx.rng
    art = ctx.pick("gitrepo")
    repo, person = art.path, art.meta["person"]
    path = f"src/{ctx.word(NOUNS)}.py"
    lines = [f"{w.upper()} = {rng.randint(0, 999)}" for w in rng.sample(WORDS, 3)]
    content = "\n".join(lines) + "\n"
    patch_file = f"/app/patches/{ctx.word(ADJECTIVES)}.patch"
    patch = (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    )
    msg = f"Apply {patch_file.rsplit('/', 1)[1]}"
    solution = "\n".join(
        [
            f"git -C {repo} apply {patch_file}",
            f"git -C {repo} add {path}",
            f"{_git(repo, person)} commit -q -m '{msg}'",
        ]
    )
    return make_step(
        ctx,
        "vcs.apply_patch",
        f"""
        Apply the patch `{patch_file}` to the repository `{repo}` and commit the result on
        `main` with the message `{msg}`.
        """,
        solution,
        [("patch_commit", _find_commit_test(repo, msg, path, content))],
        files=[EnvFile(patch_file, patch)],
        mentions=[patch_file, repo, msg, "main"],
    )
