"""The apptainer verifier container (t1.sandbox.apptainer_verify): its argument list for a sample
spec everywhere; running it needs the `apptainer` binary (skipped with that reason here).

    .venv/bin/pytest tests/sandbox/test_apptainer_verify.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.sandbox.apptainer import have_apptainer, instance_start_args
from t1.sandbox.apptainer_verify import verify_binds, verify_exec_args
from t1.sandbox.base import Limits, SandboxSpec
from t1.sandbox.compartment import HARNESS_INSIDE

HARNESS_ARGV = [  # the shape t1.verify.hardened builds for the bwrap compartment
    "/run/t1/host/usr/lib64/ld-linux-x86-64.so.2", "--library-path", "/run/t1/host/usr/lib",
    "/run/t1/host/usr/bin/python3", "-I", "-S", f"{HARNESS_INSIDE}/harness.py", "--fd", "{fd}",
    "--site", f"{HARNESS_INSIDE}/site", "--trust", "/tests", "--", "/tests",
    "-c", f"{HARNESS_INSIDE}/pytest.ini", "--rootdir", "/tests", "--confcutdir", "/tests",
    "-p", "no:cacheprovider", "-rA",
]  # fmt: skip


def _binds(tmp_path: Path, host_root: Path = Path("/")):
    return verify_binds("/app", tmp_path / "w", tmp_path / "logs", tmp_path / "tests",
                        tmp_path / "vlogs", tmp_path / "harness", tmp_path / "site",
                        tmp_path / "prov", host_root)  # fmt: skip


def _bound(args: list[str]) -> dict[str, str]:
    """inside -> 'host[:ro]' of every --bind."""
    out = {}
    for i, a in enumerate(args):
        if a == "--bind":
            host, inside, *ro = args[i + 1].split(":")
            out[inside] = host + (":ro" if ro else "")
    return out


def test_verify_exec_is_a_contained_read_only_overlay_with_the_harness_argv(tmp_path):
    spec = SandboxSpec(workdir="/app", limits=Limits(memory_mb=512))
    env = {"PATH": "/opt/t1/bin:/usr/bin", "HOME": "/root"}
    a = verify_exec_args(spec, "/img.sif", tmp_path / "ov", _binds(tmp_path), env, HARNESS_ARGV)
    assert a[:4] == ["apptainer", "exec", "--containall", "--cleanenv"]
    assert a[a.index("--overlay") + 1] == f"{tmp_path}/ov:ro"  # the agent's overlay, read-only
    assert "--writable-tmpfs" in a and a[a.index("--pwd") + 1] == "/app"
    assert a[a.index("--network") + 1] == "none"  # offline like the instance: no way out
    assert "nsenter" not in a and "--memory" not in a
    assert "PATH=/opt/t1/bin:/usr/bin" in a and "instance://" not in " ".join(a)
    i = a.index("/img.sif")
    assert a[i + 1 :] == HARNESS_ARGV  # the same harness argv, after the image
    b = _bound(a)
    assert b["/tests"] == f"{tmp_path}/tests:ro" and b[HARNESS_INSIDE] == f"{tmp_path}/harness:ro"
    assert b[f"{HARNESS_INSIDE}/site"] == f"{tmp_path}/site:ro"
    assert b["/opt/t1"] == f"{tmp_path}/prov:ro"
    assert b["/run/t1/host/usr"] == "/usr:ro" and b["/run/t1/host/etc"] == "/etc:ro"
    assert b["/app"] == f"{tmp_path}/w" and b["/logs"] == f"{tmp_path}/logs"  # the agent's, rw
    assert b["/logs/verifier"] == f"{tmp_path}/vlogs"
    assert b["/etc/ld.so.preload"] == "/dev/null:ro"


def test_network_follows_the_agent_and_services_join_theirs(tmp_path):
    binds = _binds(tmp_path)
    online = verify_exec_args(SandboxSpec(network=True), "i.sif", tmp_path, binds, {}, ["true"])
    assert "--net" not in online and "--network" not in online and "nsenter" not in online
    svc = verify_exec_args(SandboxSpec(), "i.sif", tmp_path, binds, {}, ["true"], services_pid=42)
    assert svc[:3] == ["nsenter", "--net=/proc/42/ns/net", "--"]
    assert "--net" not in svc and "--network" not in svc  # no new namespace: the services'
    cg = verify_exec_args(SandboxSpec(limits=Limits(memory_mb=256, max_processes=8)), "i.sif",
                          tmp_path, binds, {}, ["true"], cgroups=True)  # fmt: skip
    assert cg[cg.index("--memory") + 1] == "256M" and cg[cg.index("--pids-limit") + 1] == "8"


def test_optional_binds_and_nsswitch(tmp_path):
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc" / "nsswitch.conf").write_text("passwd: files\n")
    b = verify_binds("/srv", None, None, tmp_path / "t", tmp_path / "v", tmp_path / "h",
                     host_root=host)  # fmt: skip
    inside = [i for _, i, _ in b]
    assert "/srv" not in inside and "/logs" not in inside and "/opt/t1" not in inside
    assert f"{HARNESS_INSIDE}/site" not in inside and "/etc/nsswitch.conf" in inside
    assert all(ro for _, i, ro in b if i not in ("/logs/verifier",))


def test_instance_runs_over_a_host_dir_overlay(tmp_path):
    a = instance_start_args(SandboxSpec(), "t1-x", "/img.sif", [], overlay=tmp_path / "ov")
    assert a[a.index("--overlay") + 1] == str(tmp_path / "ov") and "--writable-tmpfs" not in a


@pytest.mark.apptainer
@pytest.mark.skipif(not have_apptainer(), reason="apptainer is not installed (argv tests above)")
def test_real_verify_container_reads_the_overlay(tmp_path):  # pragma: no cover - needs apptainer
    from t1.sandbox import open_sandbox
    from t1.sandbox.apptainer_verify import run_apptainer_verify, stop_instance_agent

    with open_sandbox(SandboxSpec(image="docker://debian:bookworm-slim"), "apptainer") as sb:
        sb.exec("echo agent > /etc/t1-mark")
        stop_instance_agent(sb)
        for d in ("tests", "logs", "harness"):
            (tmp_path / d).mkdir()
        run = run_apptainer_verify(sb, ["/bin/sh", "-c", "cat /etc/t1-mark; echo '{}' >&{fd}"],
                                   {}, tmp_path / "tests", tmp_path / "logs",
                                   tmp_path / "harness", 60)  # fmt: skip
        assert "agent" in run.output and run.records == [{}]
