"""Engine benchmarks (issue 2), side by side with what a user would do by hand.

  python tests/bench/bench_engine.py [--units 2000] [--big 100000] [--slurm]

1. overhead per unit: raw ``client.map`` of a no-op vs the engine (ledger, progress, retries) on
   the same LocalCluster. Goal <= 5 ms/unit.
2. planning + ledger for 100k units on the driver (plan, run inline, record; then a resume that
   skips them all): seconds and peak driver RSS. Goal <= 10 s, <= 500 MB.
3. --slurm: a CPU-bound step (units x 250 ms) on 1 vs 2 SLURM worker jobs. Goal >= 1.7x.
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from distributed import Client, LocalCluster

from zarrmill.cluster_check import Params
from zarrmill.io.storage.guard import bookkeeping_dir
from zarrmill.runtime.execution.engine import run_step
from zarrmill.runtime.execution.step_run import StepOptions
from zarrmill.runtime.execution.executors import Executor
from zarrmill.runtime.execution.registry import get_task
from zarrmill.runtime.execution.spec import ExecutorSpec


def noop(i: int) -> int:
    return 0


def engine_step(tmp: Path, name: str, units: int, client, busy_ms: float = 0.0) -> float:
    params = Params(output=str(tmp / name), units=units, busy_ms=busy_ms, record=False)
    opts = StepOptions(quiet=True)
    t0 = time.perf_counter()
    run_step(name, get_task("cluster-check"), params, lambda plan: client, opts)
    return time.perf_counter() - t0


def bench_overhead(tmp: Path, units: int) -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.gather(client.map(noop, range(50)))  # warm up
        t0 = time.perf_counter()
        client.gather(client.map(noop, range(units)))
        raw = time.perf_counter() - t0
        eng = engine_step(tmp, "overhead", units, client)
    print(f"1. no-op units on LocalCluster(2 workers), {units} units")
    print(f"   raw client.map      {raw / units * 1e3:7.2f} ms/unit")
    print(f"   zarrmill engine     {eng / units * 1e3:7.2f} ms/unit   "
          f"(ratio {eng / raw:.2f}x raw; extra {(eng - raw) / units * 1e3:.2f} ms/unit; goal <= 5 ms/unit)")


def bench_planning(tmp: Path, units: int) -> None:
    first = engine_step(tmp, "plan", units, None)
    # Rerun on the same output: plan again, read the ledger, skip everything.
    params = Params(output=str(tmp / "plan"), units=units, record=False)
    ledger_dir = bookkeeping_dir(params.output) / "steps" / "plan"
    (ledger_dir / "step.json").write_text((ledger_dir / "step.json").read_text().replace('"done"', '"running"'))
    t0 = time.perf_counter()
    run_step("plan", get_task("cluster-check"), params, lambda plan: None, StepOptions(quiet=True))
    resume = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"2. {units} units on the driver (inline): plan+run+record {first:.2f} s, "
          f"resume (plan + read ledger + skip all) {resume:.2f} s, peak driver RSS {rss_mb:.0f} MB "
          f"(goal <= 10 s, <= 500 MB)")


def bench_slurm(tmp: Path, units: int, busy_ms: float) -> None:
    times = {}
    for jobs in (1, 2):
        spec = ExecutorSpec(kind="slurm", jobs=jobs, slurm={
            "queue": "debug", "cores": 1, "memory": "1GB", "processes": 1, "walltime": "00:10:00",
            "interface": "lo"})
        with Executor(spec, f"bench-{jobs}", tmp / f"run{jobs}") as ex:
            client = ex.client_for(None)
            client.wait_for_workers(jobs, timeout=120)
            times[jobs] = engine_step(tmp, f"slurm{jobs}", units, client, busy_ms)
    print(f"3. CPU-bound step, {units} units x {busy_ms:.0f} ms on real SLURM")
    print(f"   1 worker job  {times[1]:6.2f} s")
    print(f"   2 worker jobs {times[2]:6.2f} s   speed-up {times[1] / times[2]:.2f}x (goal >= 1.7x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--big", type=int, default=100_000)
    ap.add_argument("--slurm", action="store_true")
    ap.add_argument("--slurm-units", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_planning(tmp, args.big)
        bench_overhead(tmp, args.units)
        if args.slurm:
            bench_slurm(tmp, args.slurm_units, 250.0)


if __name__ == "__main__":
    main()
