"""The apptainer verifier container (t1.sandbox.apptainer_verify) and its dispatch from
t1.verify.verifier.score_in_sandbox: the argument lists and the command the verifier builds
for an apptainer sandbox everywhere (up to the exec of the binary); running it needs the
`apptainer` binary (those tests skip with that reason here).

    .venv/bin/pytest tests/sandbox/test_apptainer_verify.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from t1.sandbox.apptainer import ApptainerSandbox, have_apptainer, instance_start_args
from t1.sandbox.apptainer_verify import (
    ARGV_RECORD,
    Expect,
    check_verify_args,
    env_arg,
    run_apptainer_verify,
    verify_binds,
    verify_exec_args,
)
from t1.sandbox.base import Limits, SandboxError, SandboxSpec
from t1.sandbox.compartment import HARNESS_INSIDE, TMP_INSIDE
from t1.sandbox.provision import locate
from t1.tasks import load_task
from t1.verify.hardened import compartment_kind
from t1.verify.verifier import score_in_sandbox

REPO = Path(__file__).resolve().parents[2]
NO_BINARY = "apptainer is not installed (the argv tests above run everywhere)"
HARNESS_ARGV = [  # the shape t1.verify.script_plan.runner_argv builds for either compartment
    f"{HARNESS_INSIDE}/ld.so", "--library-path", "/run/t1/host/usr/lib",
    "/run/t1/host/usr/bin/python3.11", "-I", "-S", f"{HARNESS_INSIDE}/script_runner.py",
    "--fd", "7", "--config", f"{HARNESS_INSIDE}/runner.json",
]  # fmt: skip


def _binds(tmp_path: Path, host_root: Path = Path("/")):
    return verify_binds("/app", tmp_path / "w", tmp_path / "logs", tmp_path / "tests",
                        tmp_path / "vlogs", tmp_path / "harness",
                        {"site": tmp_path / "site", "site-3.13": tmp_path / "site13"},
                        tmp_path / "prov", host_root, tmp_dir=tmp_path / "tmp")  # fmt: skip


def _bound(args: list[str]) -> dict[str, str]:
    """inside -> 'host[:ro]' of every --bind."""
    out = {}
    for i, a in enumerate(args):
        if a == "--bind":
            host, inside, *ro = args[i + 1].split(":")
            out[inside] = host + (":ro" if ro else "")
    return out


def _expect(tmp_path: Path, **kw) -> Expect:
    base = dict(image="/img.sif", overlay=tmp_path / "ov", tests_dir=tmp_path / "tests",
                harness_dir=tmp_path / "harness", entry=HARNESS_ARGV, fd=7, home=Path("/root"))  # fmt: skip
    return Expect(**{**base, **kw})


def _args(tmp_path: Path, spec: SandboxSpec | None = None, **kw) -> list[str]:
    spec = spec or SandboxSpec(workdir="/app", limits=Limits(memory_mb=512))
    env = {"PATH": "/opt/t1/bin:/usr/bin", "HOME": "/root"}
    return verify_exec_args(spec, "/img.sif", tmp_path / "ov", _binds(tmp_path), env,
                            HARNESS_ARGV, scratch=tmp_path / "scratch", **kw)  # fmt: skip


def _swap(args: list[str], old: str, new: str | None) -> list[str]:
    """`args` with the item `old` replaced by `new` (None: removed; a --bind with its flag)."""
    i = args.index(old)
    if new is not None:
        return args[:i] + [new] + args[i + 1 :]
    return args[: i - 1] + args[i + 1 :] if args[i - 1] == "--bind" else args[:i] + args[i + 1 :]


def test_verify_exec_is_a_contained_read_only_overlay_with_the_harness_argv(tmp_path):
    a = _args(tmp_path)
    assert a[:4] == ["apptainer", "exec", "--containall", "--cleanenv"]
    assert a[a.index("--overlay") + 1] == f"{tmp_path}/ov:ro"  # the agent's overlay, read-only
    assert "--writable-tmpfs" in a and a[a.index("--pwd") + 1] == "/app"
    assert a[a.index("--workdir") + 1] == f"{tmp_path}/scratch"  # the agent's /tmp and home
    assert a[a.index("--network") + 1] == "none"  # offline like the instance: no way out
    assert "nsenter" not in a and "--memory" not in a
    assert "PATH=/opt/t1/bin:/usr/bin" in a and "instance://" not in " ".join(a)
    i = a.index("/img.sif")
    assert a[i + 1 :] == HARNESS_ARGV  # the same runner argv, after the image
    b = _bound(a)
    assert b["/tests"] == f"{tmp_path}/tests:ro" and b[HARNESS_INSIDE] == f"{tmp_path}/harness:ro"
    assert b[f"{HARNESS_INSIDE}/site"] == f"{tmp_path}/site:ro"
    assert b[f"{HARNESS_INSIDE}/site-3.13"] == f"{tmp_path}/site13:ro"
    assert b[TMP_INSIDE] == f"{tmp_path}/tmp"  # the harness's TMPDIR, fresh and writable
    assert b["/opt/t1"] == f"{tmp_path}/prov:ro"
    assert b["/run/t1/host/usr"] == "/usr:ro" and b["/run/t1/host/etc"] == "/etc:ro"
    assert b["/app"] == f"{tmp_path}/w" and b["/logs"] == f"{tmp_path}/logs"  # the agent's, rw
    assert b["/logs/verifier"] == f"{tmp_path}/vlogs"
    assert b["/etc/ld.so.preload"] == "/dev/null:ro"
    assert check_verify_args(a, _expect(tmp_path)) == []


@pytest.mark.parametrize(
    "old, new, problem",
    [
        ("--containall", "--contain", "--containall is missing"),  # no new pid/ipc namespaces
        ("--cleanenv", "--no-home", "--cleanenv is missing"),
        ("--writable-tmpfs", "--no-init", "--writable-tmpfs is missing"),
        ("{tmp}/tests:/tests:ro", "{tmp}/tests:/tests", "/tests is not bound read-only"),
        ("{tmp}/tests:/tests:ro", None, "/tests is not bound read-only"),
        ("{tmp}/tests:/tests:ro", "/agent/tests:/tests:ro", "/tests is not bound read-only"),
        ("{tmp}/harness:/run/t1/harness:ro", "{tmp}/harness:/run/t1/harness",
         "/run/t1/harness is not bound read-only"),
        ("/dev/null:/etc/ld.so.preload:ro", None, "/etc/ld.so.preload is not bound"),
        ("/usr:/run/t1/host/usr:ro", "/usr:/run/t1/host/usr", "/run/t1/host/usr is not bound"),
        ("{tmp}/ov:ro", "{tmp}/ov", "the overlay is not the agent's read-only"),
        ("none", "bridge", "offline but the verifier gets a network"),
        ("{tmp}/prov:/opt/t1:ro", "/root:/opt/t1:ro", "binds the host's home"),
        ("{tmp}/prov:/opt/t1:ro", "{tmp}/prov:/opt/t1", "/opt/t1 is bound writable"),
        ("{tmp}/scratch", "/root", "--workdir /root is (above) the host's home"),
        ("/img.sif", "instance://t1-x", "instance://"),
        ("7", "8", "not given the outcome channel fd 7"),
        ("exec", "run", "not an `apptainer exec`"),
        ("{tmp}/w:/app", "{tmp}/w:/", "is bound over /tests or the harness"),  # hides both
        ("{tmp}/prov:/opt/t1:ro", "{tmp}/prov:/run:ro", "is bound over /tests or the harness"),
    ],
)  # fmt: skip
def test_check_catches_a_command_without_each_hardening(tmp_path, old, new, problem):
    """Negative controls: the same command with one hardening taken out fails the check."""
    a = _args(tmp_path)
    old = old.format(tmp=tmp_path)
    new = new.format(tmp=tmp_path) if new is not None else None
    bad = _swap(a, old, new)
    expect = _expect(tmp_path)
    if old == "7":  # the runner argv is what the verifier built; it names another fd
        expect = _expect(tmp_path, entry=[x if x != "7" else "8" for x in HARNESS_ARGV])
    problems = check_verify_args(bad, expect)
    assert any(problem in p for p in problems), problems
    assert check_verify_args(a, _expect(tmp_path)) == []  # and the untouched one passes


def test_check_refuses_privileges_and_a_foreign_argv(tmp_path):
    a = _args(tmp_path)
    i = a.index("--cleanenv") + 1
    for flag in ("--writable", "--keep-privs", "--allow-setuid", "--userns"):
        assert f"{flag} is set" in check_verify_args(a[:i] + [flag] + a[i:], _expect(tmp_path))
    other = a[: a.index("/img.sif") + 1] + ["/bin/sh", "-c", "echo '{}' >&7"]
    assert "the argv after the image is not the verifier's runner" in check_verify_args(
        other, _expect(tmp_path)
    )


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


def test_optional_binds_nsswitch_and_the_secrets_mask(tmp_path):
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc" / "nsswitch.conf").write_text("passwd: files\n")
    (host / "etc" / "shadow").write_text("root:secret\n")
    (host / "etc" / "shadow").chmod(0o600)
    mask = tmp_path / "mask"
    (mask / "etc").mkdir(parents=True)
    (mask / "etc" / "shadow").write_text("")
    b = verify_binds("/srv", None, None, tmp_path / "t", tmp_path / "v", tmp_path / "h",
                     host_root=host, mask_dir=mask)  # fmt: skip
    inside = [i for _, i, _ in b]
    assert "/srv" not in inside and "/logs" not in inside and "/opt/t1" not in inside
    assert f"{HARNESS_INSIDE}/site" not in inside and "/etc/nsswitch.conf" in inside
    assert (mask / "etc" / "shadow", "/run/t1/host/etc/shadow", True) in b  # after the host /etc
    assert inside.index("/run/t1/host/etc/shadow") > inside.index("/run/t1/host/etc")
    assert all(ro for _, i, ro in b if i not in ("/logs/verifier",))


def test_env_values_survive_apptainers_key_value_parser():
    assert env_arg("PATH", "/a:/b") == "PATH=/a:/b"
    assert env_arg("A", "x,y") == "A=x,y"  # one '=': taken whole
    assert env_arg("A", "k=v,w") == '"A=k=v,w"'  # more: CSV, quoted
    assert env_arg("A", 'k="v"') == '"A=k=""v"""'
    with pytest.raises(SandboxError):
        env_arg("A", '"x"')


def test_instance_runs_over_a_host_dir_overlay_and_scratch(tmp_path):
    a = instance_start_args(SandboxSpec(), "t1-x", "/img.sif", [], overlay=tmp_path / "ov",
                            scratch=tmp_path / "s")  # fmt: skip
    assert a[a.index("--overlay") + 1] == str(tmp_path / "ov") and "--writable-tmpfs" not in a
    assert a[a.index("--workdir") + 1] == str(tmp_path / "s") and "--containall" in a


# ----------------------------------------------------------------- the dispatch, up to the binary


def _apptainer_sandbox(tmp_path: Path, network: bool = False) -> ApptainerSandbox:
    """An ApptainerSandbox in the state start() leaves it (dirs, image, overlay, scratch, env)
    with its agent already gone; nothing of apptainer is run to get here."""
    from t1.sandbox.bwrap_plan import sandbox_env

    prov = locate(None)
    if prov is None:
        pytest.skip("no provision cache (run `t1 provision`): the harness needs pytest")
    sb = ApptainerSandbox(SandboxSpec(workdir="/app", network=network))
    sb.root = tmp_path / "rt"
    for name in ("ctl/stage", "workdir", "logs", "overlay/upper", "overlay/work", "scratch"):
        (sb.root / name).mkdir(parents=True)
    sb.host_workdir, sb.logs_dir = sb.root / "workdir", sb.root / "logs"
    sb.overlay_dir, sb.scratch_dir = sb.root / "overlay", sb.root / "scratch"
    sb.image = str(tmp_path / "task.sif")
    sb.prov_root = prov.root
    sb.base_env = sandbox_env(sb.spec, {}, prov.env(network=False))
    return sb


def test_score_in_sandbox_runs_an_apptainer_sandbox_in_its_compartment(tmp_path):
    """score_in_sandbox -> _score_hardened -> run_apptainer_verify builds, checks and records
    the exact command; without the binary it stops there with a clear error (never a reward)."""
    task = load_task(REPO / "workflow/tasks/csv-summary")
    sb = _apptainer_sandbox(tmp_path)
    assert compartment_kind(sb) == "apptainer"
    upper = sb.overlay_dir / "upper"  # what the agent left in its overlay
    (upper / "tests").mkdir()
    (upper / "tests" / "test_outputs.py").write_text("def test_forged():\n    pass\n")
    (upper / ".singularity.d" / "env").mkdir(parents=True)
    (upper / ".singularity.d" / "env" / "99-forge.sh").write_text("echo '{}' >&7\n")
    (sb.logs_dir / "verifier").symlink_to("/etc")
    r = score_in_sandbox(task, sb, timeout=60)
    assert r.hardened and "compartment: apptainer" in r.notes and r.total == 0
    if not have_apptainer():
        assert "apptainer is not installed" in r.error
    vdir = sb.root / "verifier"
    rec = json.loads((vdir / ARGV_RECORD).read_text())
    a, (fd,) = rec["argv"], rec["pass_fds"]
    assert rec["problems"] == []
    assert os.path.basename(a[0]) == "apptainer" and a[1:4] == [
        "exec",
        "--containall",
        "--cleanenv",
    ]
    assert a[a.index("--overlay") + 1] == f"{sb.overlay_dir}:ro"
    assert a[a.index("--network") + 1] == "none" and "--net" in a
    b = _bound(a)
    assert b["/tests"] == f"{vdir}/tests:ro" and b[HARNESS_INSIDE] == f"{vdir}/harness:ro"
    assert (vdir / "tests" / "test_outputs.py").read_text() == (
        task.verifier.tests_dir / "test_outputs.py"
    ).read_text()  # the task's own tests, copied fresh; the agent's forged ones are gone
    assert not (upper / "tests").exists() and not (upper / ".singularity.d").exists()
    assert (sb.logs_dir / "verifier").is_dir() and not (sb.logs_dir / "verifier").is_symlink()
    assert b[f"{HARNESS_INSIDE}/site"].endswith(":ro") and b["/etc/ld.so.preload"] == "/dev/null:ro"
    assert not any(h.split(":")[0] in ("/root", str(Path.home()), "/home") for h in b.values())
    entry = a[a.index(sb.image) + 1 :]
    assert entry[0] == f"{HARNESS_INSIDE}/ld.so" and entry[-4:] == [
        "--fd", str(fd), "--config", f"{HARNESS_INSIDE}/runner.json",
    ]  # fmt: skip
    # the runner starts from its bytecode, compiled on the host for the host's python3
    # (t1.verify.bytecode), shipped beside its source
    assert f"{HARNESS_INSIDE}/script_runner.pyc" in entry
    assert (vdir / "harness" / "script_runner.pyc").is_file()
    assert (vdir / "harness" / "script_runner.py").is_file()
    cfg = json.loads((vdir / "harness" / "runner.json").read_text())
    assert cfg["script"] == "/tests/test.sh" and cfg["proxy"] is True
    envs = [a[i + 1] for i, x in enumerate(a) if x == "--env"]  # the harness's env only
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in envs and "TMPDIR=/run/t1/tmp" in envs
    assert not any(e.startswith(("PYTEST_ADDOPTS", "LD_", "BASH_ENV=")) for e in envs)
    # negative control: the recorded command with /tests writable (or missing) fails the check
    exp = Expect(sb.image, sb.overlay_dir, vdir / "tests", vdir / "harness", entry, fd)
    assert check_verify_args(a, exp) == []
    rw = _swap(a, f"{vdir}/tests:/tests:ro", f"{vdir}/tests:/tests")
    assert any("/tests is not bound read-only" in p for p in check_verify_args(rw, exp))
    assert any(
        "/tests" in p for p in check_verify_args(_swap(a, f"{vdir}/tests:/tests:ro", None), exp)
    )


def test_the_verifier_never_runs_while_the_agent_does(tmp_path):
    """Negative control of the agent-stop step: an instance still running is refused by the
    compartment, and a stop that fails is an error before any command is built."""
    sb = _apptainer_sandbox(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "v").mkdir()
    sb._started = True  # the instance runs (as after start())
    with pytest.raises(SandboxError, match="still runs"):
        run_apptainer_verify(sb, ["true"], {}, tmp_path / "t", tmp_path / "v", tmp_path / "h", 5)
    assert not (tmp_path / ARGV_RECORD).exists()
    if have_apptainer():
        return  # the stop below would really run `apptainer instance stop`
    r = score_in_sandbox(load_task(REPO / "workflow/tasks/csv-summary"), sb, timeout=30)
    assert r.hardened and r.total == 0 and "could not stop the agent's processes" in r.error
    assert not (sb.root / "verifier" / ARGV_RECORD).exists()  # nothing was built or run


def test_an_apptainer_sandbox_without_a_host_dir_overlay_is_verified_in_its_shell(tmp_path):
    sb = _apptainer_sandbox(tmp_path)
    sb.overlay_dir = None  # T1_APPTAINER_OVERLAY=0: nothing to run a second container over
    assert compartment_kind(sb) is None
    r = score_in_sandbox(load_task(REPO / "workflow/tasks/csv-summary"), sb, timeout=30)
    assert not r.hardened and "sandbox is not started" in r.error


# ----------------------------------------------------------------- with the binary


@pytest.mark.apptainer
@pytest.mark.skipif(not have_apptainer(), reason=NO_BINARY)
def test_real_verify_container_reads_the_overlay(tmp_path):  # pragma: no cover - needs apptainer
    from t1.sandbox import open_sandbox
    from t1.sandbox.apptainer_verify import stop_instance_agent

    with open_sandbox(SandboxSpec(image="docker://debian:bookworm-slim"), "apptainer") as sb:
        sb.exec("echo agent > /etc/t1-mark; echo tmp > /tmp/t1-mark")
        stop_instance_agent(sb)
        for d in ("tests", "logs", "harness"):
            (tmp_path / d).mkdir()
        dirs = (tmp_path / "tests", tmp_path / "logs", tmp_path / "harness")
        with pytest.raises(SandboxError, match="verifier command refused"):  # no --fd FD
            run_apptainer_verify(sb, ["/bin/sh", "-c", "echo '{}' >&{fd}"], {}, *dirs, 60)
        sh = "cat /etc/t1-mark /tmp/t1-mark; touch /tests/x || echo tests-ro; touch /etc/y"
        run = run_apptainer_verify(sb, ["/bin/sh", "-c", sh], {}, *dirs, 60, channel=False)
        assert all(w in run.output.split() for w in ("agent", "tmp", "tests-ro")), run.output
        assert not (sb.overlay_dir / "upper" / "etc" / "y").exists()  # the overlay is read-only


@pytest.mark.apptainer
@pytest.mark.skipif(not have_apptainer(), reason=NO_BINARY)
@pytest.mark.parametrize("agent", ["oracle", "noop"])
def test_real_oracle_and_noop_score_in_the_apptainer_compartment(agent):  # pragma: no cover
    from t1.tasks.env import open_task_sandbox
    from t1.verify.oracle import run_solution

    task = load_task(REPO / "workflow/tasks/word-frequency")
    with open_task_sandbox(task, "apptainer", None, None, "never") as sb:
        if agent == "oracle":
            run_solution(task, sb)
        r = score_in_sandbox(task, sb)
    assert r.hardened and "compartment: apptainer" in r.notes and r.error is None
    assert r.total > 0 and (r.passed == r.total if agent == "oracle" else r.passed < r.total)
