"""The compartment's Python files compiled once per host (t1.verify.bytecode)."""

import marshal
import shutil
import subprocess

from t1.verify import bytecode
from t1.verify.hardened import HARNESS_SIBLINGS, HARNESS_SOURCE

INSIDE = "/run/t1/harness"


def test_each_file_compiles_for_the_hosts_python_with_its_path_inside(tmp_path):
    sources = [HARNESS_SOURCE, *HARNESS_SIBLINGS]
    pycs = bytecode.harness_bytecode(sources, INSIDE, cache=tmp_path)
    assert pycs is not None and set(pycs) == {s.name for s in sources}
    for src in sources:
        data = pycs[src.name].read_bytes()
        assert int.from_bytes(data[4:8], "little") == 0b01  # hash-based, unchecked (PEP 552)
        code = marshal.loads(data[16:])
        assert code.co_filename == f"{INSIDE}/{src.name}"  # tracebacks and trust checks
    # the host's python3 runs the runner's client from it, as the compartment does
    r = subprocess.run(["/usr/bin/python3", "-I", "-S", str(pycs["script_runner.py"]), "call",
                        "python3", "-c", "print(6 * 7)"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr


def test_built_once_per_content_and_rebuilt_when_a_file_changes(tmp_path):
    src = tmp_path / "src" / "mod.py"
    src.parent.mkdir()
    src.write_text("X = 1\n")
    cache = tmp_path / "cache"
    first = bytecode.harness_bytecode([src], INSIDE, cache=cache)["mod.py"]
    assert bytecode.harness_bytecode([src], INSIDE, cache=cache)["mod.py"] == first
    src.write_text("X = 2\n")
    second = bytecode.harness_bytecode([src], INSIDE, cache=cache)["mod.py"]
    assert second != first and second.is_file() and first.is_file()
    assert len(list(cache.iterdir())) == 2  # no temporary dirs left behind


def test_none_when_it_cannot_be_built_so_the_sources_run(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    assert bytecode.harness_bytecode([bad], INSIDE, cache=tmp_path / "c") is None
    assert bytecode.harness_bytecode([HARNESS_SOURCE], INSIDE, python=str(tmp_path / "none"),
                                     cache=tmp_path / "c") is None  # fmt: skip
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "c").glob(".*"))


def test_the_harness_loads_its_siblings_compiled_when_they_are_shipped(tmp_path):
    for src in (HARNESS_SOURCE, *HARNESS_SIBLINGS):
        (tmp_path / src.name).write_bytes(src.read_bytes())
    pycs = bytecode.harness_bytecode([*HARNESS_SIBLINGS], str(tmp_path), cache=tmp_path / "c")
    (tmp_path / "proxy_client.pyc").write_bytes(pycs["proxy_client.py"].read_bytes())
    probe = (
        "import sys; sys.argv = ['harness']; "
        f"import runpy; g = runpy.run_path({str(tmp_path / 'harness.py')!r}); "
        "g['_sibling']('proxy'); m = g['_sibling']('proxy_client'); "
        "n = g['_sibling']('proxy_import'); "
        "print(m.__spec__.origin.endswith('.pyc'), n.__spec__.origin.endswith('.py'))"
    )
    r = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", probe], capture_output=True,
                       text=True)  # fmt: skip
    assert r.stdout.split() == ["True", "True"], r.stderr


def test_a_cache_removed_under_a_running_process_is_built_again(tmp_path):
    """Each verifier run asks; the answer is kept per process by the files' stat, but a cache
    someone cleaned meanwhile is rebuilt rather than handed out missing."""
    src = tmp_path / "mod.py"
    src.write_text("X = 1\n")
    cache = tmp_path / "cache"
    pyc = bytecode.harness_bytecode([src], INSIDE, cache=cache)["mod.py"]
    shutil.rmtree(cache)
    assert bytecode.harness_bytecode([src], INSIDE, cache=cache)["mod.py"] == pyc
    assert pyc.is_file()
