"""The secrets mask layer, built for a small fake host root (needs root: whiteouts, xattrs).

.venv/bin/pytest tests/sandbox/test_mask.py -q
"""

from __future__ import annotations

import os
import stat

import pytest

from t1.sandbox.mask import build_mask, host_key, mask_layer, secret_paths

if os.geteuid() != 0:
    pytest.skip(
        "building a mask layer needs root (whiteout devices, trusted xattrs)",
        allow_module_level=True,
    )


@pytest.fixture
def fake_root(tmp_path):
    r = tmp_path / "host"
    for d in ("usr/bin", "etc/ssl/private", "etc/apt/apt.conf.d", "var/lib/dpkg", "var/lib/mysql/db",
              "var/lib/apt/lists/partial", "var/log", "var/cache/apt", "var/cache/secretapp"):  # fmt: skip
        (r / d).mkdir(parents=True)
    (r / "usr/bin/tool").write_text("#!/bin/sh\n")
    (r / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    (r / "etc/shadow").write_text("root:$6$salt$HASHHASH:19000:0:99999:7:::\nbin:*:19000::::::\n")
    (r / "etc/shadow").chmod(0o640)
    (r / "etc/munge.key").write_text("KEY")
    (r / "etc/munge.key").chmod(0o600)
    (r / "etc/ssl/private").chmod(0o700)
    (r / "etc/ssl/private/host.pem").write_text("PEM")
    (r / "var/lib/mysql/db/t.frm").write_text("DATA")
    (r / "var/lib/dpkg/status").write_text("Package: x\n")
    (r / "var/log/syslog").write_text("LOG")
    (r / "var/lib/apt/lists/partial").chmod(0o700)
    return r


def test_secret_paths_finds_private_files_and_dirs(fake_root):
    files, dirs = secret_paths(fake_root)
    assert "etc/shadow" in files and "etc/munge.key" in files
    assert "etc/ssl/private" in dirs
    assert "etc/ssl/private/host.pem" not in files  # not descended into
    assert "usr/bin/tool" not in files and "etc/passwd" not in files


def test_mask_layer_contents(fake_root, tmp_path):
    out = tmp_path / "mask"
    out.mkdir()
    build_mask(out, fake_root)
    shadow = (out / "etc/shadow").read_text()
    assert "HASHHASH" not in shadow and shadow.startswith("root:*:")
    assert (out / "etc/munge.key").read_text() == ""
    assert stat.S_IMODE((out / "etc/munge.key").stat().st_mode) == 0o600
    assert os.getxattr(out / "etc/ssl/private", "trusted.overlay.opaque") == b"y"
    assert list((out / "etc/ssl/private").iterdir()) == []
    wh = (out / "var/lib/mysql").lstat()  # not an apt/dpkg dir: whited-out
    assert stat.S_ISCHR(wh.st_mode) and wh.st_rdev == os.makedev(0, 0)
    assert stat.S_ISCHR((out / "var/cache/secretapp").lstat().st_mode)
    assert not (out / "var/lib/dpkg").exists()  # kept: shows through from the host
    assert os.getxattr(out / "var/log", "trusted.overlay.opaque") == b"y"
    part = (out / "var/lib/apt/lists/partial").stat()
    assert part.st_uid == 0 and stat.S_IMODE(part.st_mode) == 0o755  # root-owned work dir
    assert 'APT::Sandbox::User "root"' in (out / "etc/apt/apt.conf.d/99t1-sandbox").read_text()
    assert not (out / "usr/bin").exists()


def test_mask_layer_is_cached_by_host_state(fake_root, tmp_path):
    cache = tmp_path / "cache"
    a = mask_layer(cache, fake_root)
    assert mask_layer(cache, fake_root) == a
    (fake_root / "etc/new-secret").write_text("s")  # /etc changed: new key, new layer
    b = mask_layer(cache, fake_root)
    assert b != a and host_key(fake_root) == b.name
    assert (b / "DONE").exists() and a.exists()  # the old one may still be in use


def test_shadow_files_synthesized_from_passwd_and_group(fake_root, tmp_path):
    (fake_root / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\nsvc:x:5:5::/:/bin/false\n")
    (fake_root / "etc/group").write_text("root:x:0:\nshadow:x:42:\nsvc:x:5:alice\n")
    (fake_root / "etc/gshadow").write_text("root:$6$GHASH::\n")  # the host's: never copied
    (fake_root / "etc/gshadow").chmod(0o640)
    out = tmp_path / "mask"
    out.mkdir()
    build_mask(out, fake_root)
    for rel in ("etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-"):  # - : none on host
        st = (out / rel).stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 42, 0o640), rel
    rows = [ln.split(":") for ln in (out / "etc/shadow").read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("root", "*"), ("svc", "*")] and "HASH" not in str(rows)
    g = (out / "etc/gshadow").read_text()
    assert g == "root:*::\nshadow:*::\nsvc:*::alice\n"
