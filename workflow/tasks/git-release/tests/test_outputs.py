"""Verifier of git-release: history, tag, branch and work tree of /app/repo."""

import subprocess


def git(*args):
    out = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", "/app/repo", *args],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def subjects():
    return git("log", "--format=%s", "main").splitlines()


def test_history_not_rewritten():
    assert subjects()[-3:] == ["Shout the greeting", "Version 1.0.0", "Add greeting"]


def test_old_tag_kept():
    assert git("rev-parse", "v1.0.0^{commit}") == git(
        "rev-parse", "main~1" if len(subjects()) == 3 else "main~2"
    )


def test_revert_is_new_commit():
    assert len(subjects()) == 4 and subjects()[0].startswith("Revert")


def test_greeting_restored():
    assert git("show", "main:greet.txt") == "hello"


def test_tag_is_annotated():
    assert git("cat-file", "-t", "v1.0.1") == "tag"


def test_tag_message():
    assert git("tag", "-l", "--format=%(contents:subject)", "v1.0.1") == "release 1.0.1"


def test_tag_points_at_main():
    assert git("rev-parse", "v1.0.1^{commit}") == git("rev-parse", "main")


def test_release_branch_at_tag():
    assert git("rev-parse", "release/1.0") == git("rev-parse", "v1.0.1^{commit}")


def test_worktree_clean():
    assert git("status", "--porcelain") == ""
