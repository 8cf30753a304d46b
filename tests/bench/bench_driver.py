"""The driver alone on a full plate: plan time, driver memory, ledger size, resume time, no pixels.

  python tests/bench/bench_driver.py [--wells 1536] [--grid 3] [--channels 4] [--z 50]
                                     [--shape 2000,2000] [--workdir DIR]

A CellVoyager measurement's metadata (the .mrf and .mlf ``generate-plate`` writes, one mlf record
per plane) is written for a whole plate, here 1536 wells x 3x3 fields x 4 channels x 50 z planes
(2.76 M planes), without a single TIFF. ``ingest layout: well --set missing=zeros`` then runs with
``--executor sync`` in a process whose unit runner is replaced by one that marks each unit done
without reading or writing pixels, so what is timed is what the driver does for a plate of that
size: read and validate the metadata (and look for each of the 2.76 M files), plan the units,
create the store's skeleton, keep the ledger, and finish (metadata, tables).

Three runs, each in a fresh process, wall time and peak RSS of the process tree:
1. the whole step (no pixels);
2. a rerun of the finished step (it skips);
3. a run killed after half its units, then its resume (plan again, skip the done half).
The ledger's size on disk is reported after run 1."""
from __future__ import annotations

import argparse
import string
import sys
import tempfile
import time
from pathlib import Path

from measure import run_measured, table

from zarrmill.io.storage.guard import bookkeeping_dir

# run in the measured process: the engine as it is, with units that do nothing
DRIVER = r"""
import os, sys, time
from zarrmill.runtime.core import ledger
from zarrmill.runtime.execution import unit_runners
stop_after = int(os.environ.get("BENCH_STOP_AFTER", "0"))
if stop_after:  # units without pixels take microseconds, real ones seconds: record them as often
    ledger.FLUSH_EVERY_S = 0.01

def no_pixels(task, params, todo, client, opts):
    for n, unit in enumerate(todo):
        if n == 0:  # the plan is done and the first unit handed out: what a resume waits for
            print(f"first unit after {time.time() - float(os.environ['BENCH_T0']):.2f} s", file=sys.stderr, flush=True)
        if stop_after and n == stop_after:
            os._exit(9)  # killed mid-step: the ledger holds what was marked done so far
        yield unit, 0, None

unit_runners.run_inline = no_pixels
from zarrmill.runtime.front.cli import main
sys.argv = ["zarrmill"] + sys.argv[1:]
sys.exit(main())
"""


def plate_wells(n: int) -> tuple[list[str], list[int]]:
    """n wells of the smallest standard plate that holds them, row by row."""
    for rows, cols in ((2, 3), (4, 6), (8, 12), (16, 24), (32, 48)):
        if rows * cols >= n:
            break
    names = [string.ascii_uppercase[r] if r < 26 else "A" + string.ascii_uppercase[r - 26] for r in range(rows)]
    return [f"{names[i // cols]}{i % cols + 1:02d}" for i in range(n)], [rows, cols]


def write_metadata(raw: Path, a: argparse.Namespace) -> float:
    from zarrmill import generate_plate as gp

    wells, plate_shape = plate_wells(a.wells)
    p = gp.Params(output=str(raw), format="cellvoyager", wells=wells, grid=[a.grid, a.grid],
                  shape=[int(v) for v in a.shape.split(",")], channels=a.channels, z_planes=a.z,
                  plate_shape=plate_shape)
    raw.mkdir(parents=True)
    t0 = time.perf_counter()
    gp.finish(p, None)  # the mrf and mlf only: no field is rendered
    return time.perf_counter() - t0


def measured(cmd: list[str]):
    import os

    os.environ["BENCH_T0"] = repr(time.time())
    return run_measured(cmd)


def first_unit(run) -> str:
    line = next((x for x in run.output.splitlines() if x.startswith("first unit after ")), "")
    return line.split()[3] if line else "?"


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wells", type=int, default=1536)
    ap.add_argument("--grid", type=int, default=3)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--z", type=int, default=50)
    ap.add_argument("--shape", default="2000,2000")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        raw, out = Path(tmp) / "raw", Path(tmp) / "plate.ome.zarr"
        seconds = write_metadata(raw, a)
        planes = a.wells * a.grid ** 2 * a.channels * a.z
        print(f"metadata: {a.wells} wells x {a.grid}x{a.grid} fields x {a.channels} channels x {a.z} z = "
              f"{planes:,} planes, {du(raw) / 1e6:.0f} MB of mrf/mlf written in {seconds:.1f} s")
        cmd = [sys.executable, "-c", DRIVER, "task", "ingest", "--executor", "sync", "--set", f"input={raw}",
               "--set", f"output={out}", "--set", "layout=well", "--set", "missing=zeros"]
        rows = []
        full = measured(cmd)
        units = next((line for line in full.output.splitlines() if " units, " in line), "?")
        print(units)
        ledger = du(bookkeeping_dir(out))  # owner marker, created.log, the step's ledger
        store_files = sum(1 for f in out.rglob("*") if f.is_file())
        rows.append(("whole step, no pixels", first_unit(full), f"{full.seconds:.1f}", f"{full.peak_mb:.0f}"))
        again = measured(cmd)
        rows.append(("rerun of the finished step (skips)", "-", f"{again.seconds:.1f}", f"{again.peak_mb:.0f}"))
        n_units = int(units.split(" units")[0].rsplit(" ", 1)[-1]) if units != "?" else 0
        import os
        import shutil

        shutil.rmtree(out)
        os.environ["BENCH_STOP_AFTER"] = str(max(1, n_units // 2))
        try:
            measured(cmd)
        except RuntimeError:
            pass  # killed, as intended
        del os.environ["BENCH_STOP_AFTER"]
        resumed = measured(cmd)
        skipped = next((line for line in resumed.output.splitlines() if " units, " in line), "?")
        rows.append((f"resume after a kill at half ({skipped.split(': ', 1)[-1]})", first_unit(resumed),
                     f"{resumed.seconds:.1f}", f"{resumed.peak_mb:.0f}"))
        print(table(rows, ("driver run", "first unit s", "wall s", "peak MB")))
        print(f"store skeleton: {store_files} files; ledger and bookkeeping: {ledger / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
