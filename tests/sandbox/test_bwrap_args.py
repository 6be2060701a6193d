"""Pure argument construction of the bwrap backend, its limits and overlays (no sandbox runs).

.venv/bin/pytest tests/sandbox/test_bwrap_args.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.sandbox.base import Limits, SandboxSpec
from t1.sandbox.bwrap_plan import Plan, bwrap_args, plan_overlays, sandbox_env
from t1.sandbox.limits import Cgroup, join_script, rlimit_prefix, ulimit_script
from t1.sandbox.overlay import MountError, Overlay


def _plan(tmp_path: Path, **kw) -> Plan:
    p = Plan(root=tmp_path / "sb", workdir_host=tmp_path / "w", logs_host=tmp_path / "logs", **kw)
    return p


def pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def test_isolation_flags(tmp_path):
    a = bwrap_args(SandboxSpec(), _plan(tmp_path), as_root=True)
    for flag in (
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
    ):
        assert flag in a
    assert a[a.index("--cap-drop") + 1] == "ALL"
    assert "--new-session" not in a  # ^C must reach the foreground group through the pty
    assert "--unshare-user" not in a
    assert a[a.index("--hostname") + 1] == "sandbox"


def test_network_only_when_asked_and_userns_when_not_root(tmp_path):
    a = bwrap_args(SandboxSpec(network=True), _plan(tmp_path), as_root=False)
    assert "--unshare-net" not in a
    assert "--unshare-user" in a


def test_binds_only_system_dirs_and_own_paths(tmp_path):
    plan = _plan(tmp_path, provision=tmp_path / "prov")
    a = bwrap_args(SandboxSpec(workdir="/app"), plan, as_root=False)
    binds = pairs(a, "--bind") + pairs(a, "--ro-bind")
    sources = {src for src, _ in binds}
    assert {"/usr", "/etc", "/var"} <= sources  # no overlays planned: read-only host dirs
    for private in ("/root", "/home", "/srv", "/mnt", "/opt", "/work", "/tmp", "/media", "/"):
        assert private not in sources
    assert (str(tmp_path / "w"), "/app") in pairs(a, "--bind")
    assert (str(tmp_path / "logs"), "/logs") in pairs(a, "--bind")
    assert (str(tmp_path / "prov"), "/opt/t1") in pairs(a, "--ro-bind")
    assert (str(plan.ctl), "/run/t1") in pairs(a, "--ro-bind")
    assert ("/tmp", "/dev/shm") not in binds
    assert a.count("--tmpfs") >= 3 and "/tmp" in a and "/run" in a
    assert a[a.index("--chdir") + 1] == "/app"
    assert ("usr/bin", "/bin") in pairs(a, "--symlink") or not Path("/bin").is_symlink()


def test_overlay_plan_orders_layers_and_cow(tmp_path):
    env, prov, mask = tmp_path / "env", tmp_path / "prov", tmp_path / "mask"
    for d in (env / "etc", prov / "etc", mask / "etc", mask / "usr", mask / "var"):
        d.mkdir(parents=True)
    ovs = plan_overlays(tmp_path / "sb", mask, env, prov, cow=True)
    assert ovs["etc"].lowers == [env / "etc", prov / "etc", mask / "etc", Path("/etc")]
    assert ovs["usr"].lowers == [mask / "usr", Path("/usr")]
    assert ovs["etc"].upper == tmp_path / "sb" / "upper" / "etc"
    ro = plan_overlays(tmp_path / "sb", mask, None, None, cow=False)
    assert all(ov.upper is None for ov in ro.values())
    built = plan_overlays(
        tmp_path / "sb", mask, None, None, cow=True, build_into=tmp_path / "layer"
    )
    assert built["var"].upper == tmp_path / "layer" / "var"
    assert built["var"].work == tmp_path / "layer" / ".work" / "var"  # same fs as the upper


def test_overlay_bound_rw_when_cow(tmp_path):
    plan = _plan(tmp_path)
    plan.overlays = plan_overlays(plan.root, tmp_path, None, None, cow=True)
    a = bwrap_args(SandboxSpec(), plan, as_root=True)
    assert (str(plan.root / "mnt" / "usr"), "/usr") in pairs(a, "--bind")


def test_overlay_options(tmp_path):
    ov = Overlay([tmp_path / "a", Path("/etc")], tmp_path / "m", tmp_path / "u", tmp_path / "w")
    assert ov.options() == f"lowerdir={tmp_path}/a:/etc,upperdir={tmp_path}/u,workdir={tmp_path}/w"
    with pytest.raises(MountError):
        Overlay([Path("/a,b")], tmp_path / "m").options()


def test_sandbox_env_is_clean_and_prefixes_provision(monkeypatch):
    monkeypatch.setenv("T1_HOST_SECRET_TOKEN", "s3cret")
    env = sandbox_env(
        SandboxSpec(env={"FOO": "1"}), {"LAYER": "2"}, {"PATH": "/opt/t1/bin", "PIP_NO_INDEX": "1"}
    )
    assert "T1_HOST_SECRET_TOKEN" not in env
    assert env["PATH"].startswith("/opt/t1/bin:/usr/local/sbin")
    assert env["FOO"] == "1" and env["LAYER"] == "2" and env["PIP_NO_INDEX"] == "1"
    assert env["TERM"] == "dumb" and env["HOME"] == "/root"
    env2 = sandbox_env(SandboxSpec(env={"PATH": "/x/bin"}), {}, {"PATH": "/opt/t1/bin"})
    assert env2["PATH"] == "/opt/t1/bin:/x/bin"


def test_limits_scripts():
    lim = Limits(memory_mb=100, max_processes=10, max_file_mb=3)
    mem = Cgroup("x", {"memory": Path("/cg/memory/x"), "pids": Path("/cg/pids/x")})
    assert ulimit_script(lim, mem) == "ulimit -f 6144 || exit 125; "  # 3 MiB in 512-byte blocks
    assert "ulimit -v 102400" in ulimit_script(lim, None)  # no memory cgroup: RLIMIT_AS
    assert rlimit_prefix(lim, mem, as_root=True, nproc_only=True) == []
    assert rlimit_prefix(lim, mem, as_root=False, nproc_only=True) == [
        "prlimit",
        "--nproc=10",
        "--",
    ]
    js = join_script(mem)
    assert 'echo $$ > "/cg/memory/x/cgroup.procs"' in js and js.count("cgroup.procs") == 2


def test_spec_from_config():
    from t1.config import SandboxConfig
    from t1.sandbox import spec_from_config

    spec = spec_from_config(
        SandboxConfig(memory_mb=256, provision_dir="/p", cow=False), workdir="/w"
    )
    assert spec.limits.memory_mb == 256 and spec.workdir == "/w"
    assert spec.provision == Path("/p") and spec.cow is False
    assert spec_from_config(SandboxConfig()).provision is None  # default location
