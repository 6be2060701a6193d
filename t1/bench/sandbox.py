"""`t1 bench sandbox`: sandbox start time and shell round trip vs plain `bash -c`, side by side.

    t1 bench sandbox [--n 50] [--json FILE]

* start: `open_sandbox(SandboxSpec())` until its persistent shell answers (bwrap, copy-on-write
  root, cgroup, provision bound), median of n; stop() timed apart. Target: median <= 50 ms.
  Also the CPU time one start+stop costs, all processes together (cpuacct cgroup): on a
  shared, overloaded machine that is the figure that does not depend on the load.
* round trip: the same trivial commands (`true`, `echo hi`) through the persistent shell of one
  sandbox and through `subprocess.run(["bash", "-c", cmd])` outside any sandbox, interleaved
  in one run; ratio = shell / bash -c. Target: ratio <= 1.
* tty_order (`run.deterministic`, t1.sandbox.tty_order): start and commands that write to the
  terminal (one write; 1,000 writes of one process; a pipeline whose two processes write at
  once), plain and ordered sandboxes interleaved in one run; ratio = ordered / plain.
Prints one JSON object (and writes it to --json FILE). Timings depend on load: the JSON
carries the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from t1.records import write_json_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n", type=int, default=50, help="samples per figure (>= 50 for the record)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median": round(statistics.median(xs) * 1000, 3),
        "p10": round(xs[len(xs) // 10] * 1000, 3),
        "p90": round(xs[(len(xs) * 9) // 10] * 1000, 3),
    }


class CpuMeter:
    """CPU time of this process and all its descendants (sandboxes included), via a cpuacct
    cgroup (v1, root) this process joins; None where that is not possible. Load-independent,
    unlike wall time on a shared machine."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        base = Path("/sys/fs/cgroup/cpuacct")
        if os.geteuid() == 0 and (base / "cpuacct.usage").exists():
            d = base / f"t1-bench-{os.getpid()}"
            try:
                d.mkdir()
                (d / "cgroup.procs").write_text(str(os.getpid()))
                self.dir = d
            except OSError:
                self.dir = None

    def ms(self) -> float | None:
        return None if self.dir is None else int((self.dir / "cpuacct.usage").read_text()) / 1e6

    def close(self) -> None:
        if self.dir is not None:
            (self.dir.parent / "cgroup.procs").write_text(str(os.getpid()))
            time.sleep(0.05)
            try:
                self.dir.rmdir()
            except OSError:
                pass


def bench(n: int) -> dict:
    from t1.sandbox import SandboxSpec, open_sandbox

    load0 = os.getloadavg()
    open_sandbox(SandboxSpec()).stop()  # warm: mask layer, page cache
    meter = CpuMeter()
    cpu0 = meter.ms()
    starts, stops = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = open_sandbox(SandboxSpec())
        t1 = time.perf_counter()
        sb.stop()
        starts.append(t1 - t0)
        stops.append(time.perf_counter() - t1)
    time.sleep(0.5)  # let the background removal of stopped sandboxes finish
    cpu1 = meter.ms()
    meter.close()
    ro_starts = []
    for _ in range(max(n // 5, 5)):
        t0 = time.perf_counter()
        sb = open_sandbox(SandboxSpec(cow=False))
        ro_starts.append(time.perf_counter() - t0)
        sb.stop()
    rt: dict[str, dict[str, list[float]]] = {}
    with open_sandbox(SandboxSpec()) as sb:
        for cmd in ("true", "echo hi"):
            shell, plain = [], []
            for _ in range(n):
                t0 = time.perf_counter()
                r = sb.exec(cmd, timeout=10)
                shell.append(time.perf_counter() - t0)
                assert r.exit_code == 0
                t0 = time.perf_counter()
                subprocess.run(["bash", "-c", cmd], stdout=subprocess.DEVNULL, check=True)
                plain.append(time.perf_counter() - t0)
            rt[cmd] = {"shell": shell, "bash_c": plain}
    order = tty_order_costs(n)
    out = {
        "schema_version": 2,
        "status": "ok",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": f"t1 bench sandbox --n {n}",
        "n": n,
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in load0],
        "start_ms": _ms(starts),
        "start_ms_readonly_root": _ms(ro_starts),
        "stop_ms": _ms(stops),
        "cpu_ms_per_start_stop": None if cpu0 is None else round((cpu1 - cpu0) / n, 2),
        "roundtrip_ms": {},
        "targets": {"start_median_ms": 50, "roundtrip_ratio": 1.0},
    }
    for cmd, d in rt.items():
        s, b = _ms(d["shell"]), _ms(d["bash_c"])
        out["roundtrip_ms"][cmd] = {
            "persistent_shell": s,
            "bash_c_outside": b,
            "ratio_median": round(s["median"] / b["median"], 3),
        }
    out["tty_order"] = order
    out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    out["start_target_met"] = out["start_ms"]["median"] <= 50
    out["roundtrip_target_met"] = all(v["ratio_median"] <= 1 for v in out["roundtrip_ms"].values())
    return out


TTY_COMMANDS = {
    "echo hi": "echo hi",
    "1000 writes": "for i in $(seq 1000); do echo $i; done",
    "pipeline, both write": "catach.txt | grep board to cedar.txt",
}


def tty_order_costs(n: int) -> dict:
    """Start and command times of plain and ordered sandboxes, interleaved; ordered / plain."""
    from t1.sandbox import SandboxSpec, open_sandbox

    starts: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(n):
        for ordered in (False, True):
            t0 = time.perf_counter()
            sb = open_sandbox(SandboxSpec(tty_order=ordered))
            starts[ordered].append(time.perf_counter() - t0)
            sb.stop()
    times: dict[str, dict[bool, list[float]]] = {c: {False: [], True: []} for c in TTY_COMMANDS}
    with open_sandbox(SandboxSpec()) as plain, open_sandbox(SandboxSpec(tty_order=True)) as ordd:
        for _ in range(n):
            for name, cmd in TTY_COMMANDS.items():
                for ordered, sb in ((False, plain), (True, ordd)):
                    t0 = time.perf_counter()
                    sb.exec(cmd, timeout=30)
                    times[name][ordered].append(time.perf_counter() - t0)
    out: dict[str, dict] = {
        "start_ms": {
            "plain": _ms(starts[False]),
            "ordered": _ms(starts[True]),
            "ratio_median": round(
                statistics.median(starts[True]) / statistics.median(starts[False]), 3
            ),
        },
        "command_ms": {},
    }
    for name, d in times.items():
        out["command_ms"][name] = {
            "plain": _ms(d[False]),
            "ordered": _ms(d[True]),
            "ratio_median": round(statistics.median(d[True]) / statistics.median(d[False]), 3),
        }
    return out


def main(args: argparse.Namespace) -> int:
    res = bench(args.n)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        write_json_atomic(args.json, res, indent=2)
    return 0
