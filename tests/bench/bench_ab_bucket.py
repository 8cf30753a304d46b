"""Bucket writes before and after a change, in alternating runs on one moto server, each beside
its own disk run and PUT floor (the machine's load drifts: a before measured an hour apart from its
after says little).

  python tests/bench/bench_ab_bucket.py --before /path/to/checkout-of-main [--pairs 3] [--wells 4]

``--before``: a checkout (``git worktree add --detach /tmp/before main``, or ``git archive main``
unpacked) whose ``tasks/`` is imported as zarrmill for the before runs; the after runs import this
clone's. Each run: ``ingest layout: well`` into a fresh prefix and onto disk (wall time, peak RSS of
the process tree, objects, MB, requests by kind), then the PUT floor of the same object sizes
(bench_object_store.floor); the ratio is (disk + PUT floor) / bucket, the issue's measure. The
server's CPU seconds during the bucket run and during the floor are printed too: on a machine
others load, wall times swing by 40 % while what the server had to do for each stays put. The
order alternates (before, after), (after, before), ... so neither side always runs first."""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_object_store import floor, generate_plate, object_sizes, requests_since
from measure import run_measured, table, zarrmill

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3_server import S3Server  # noqa: E402

HERE = Path(__file__).resolve().parents[2]


def shim(checkout: Path, work: Path, name: str) -> str:
    """A folder where ``import zarrmill`` finds ``checkout/tasks`` (how tests/run imports the clone)."""
    folder = work / f"shim-{name}"
    folder.mkdir()
    (folder / "zarrmill").symlink_to(checkout.resolve() / "tasks")
    return str(folder)


def server_cpu(server: S3Server) -> float:
    """CPU seconds moto's process has used so far."""
    import psutil

    times = psutil.Process(server.process.pid).cpu_times()
    return times.user + times.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the code to compare against")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--wells", type=int, default=4)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ab-s3-"))
    log = work / "moto.log"
    server = S3Server().start(log)
    os.environ.update(server.env())
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the before checkout as it is
    sides = {"before": shim(args.before, work, "before"), "after": shim(HERE, work, "after")}
    try:
        raw = work / "raw"
        os.environ["PYTHONPATH"] = sides["after"]
        generate_plate(raw, args.wells)
        rows, ratios = [], {"before": [], "after": []}
        for pair in range(args.pairs):
            for side in (("before", "after") if pair % 2 == 0 else ("after", "before")):
                os.environ["PYTHONPATH"] = sides[side]
                bucket = server.make_bucket(f"ab-{pair}-{side}")
                offset, cpu0 = log.stat().st_size, server_cpu(server)
                s3 = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set",
                                           f"output=s3://{bucket}/well.ome.zarr", "--set", "layout=well"))
                kinds, _ = requests_since(log, offset)
                cpu_s3 = server_cpu(server) - cpu0
                disk = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set",
                                             f"output={work / f'{bucket}.ome.zarr'}", "--set", "layout=well"))
                sizes = object_sizes(server, f"{bucket}/well.ome.zarr")
                cpu0 = server_cpu(server)
                t_floor = floor(server, bucket, sizes)
                cpu_floor = server_cpu(server) - cpu0
                ratio = (disk.seconds + t_floor) / s3.seconds
                ratios[side].append(ratio)
                rows.append((pair, side, f"{s3.seconds:.2f}", f"{disk.seconds:.2f}", f"{t_floor:.2f}", f"{ratio:.2f}",
                             f"{cpu_s3:.2f}", f"{cpu_floor:.2f}", f"{s3.peak_mb:.0f}", f"{disk.peak_mb:.0f}",
                             len(sizes), f"{sum(sizes) / 1e6:.1f}",
                             " ".join(f"{k}:{v}" for k, v in sorted(kinds.items()))))
        print(table(rows, ("pair", "code", "bucket s", "disk s", "PUT floor s", "(disk + floor)/bucket",
                           "server CPU s: bucket", "floor", "bucket peak MB", "disk peak MB", "objects", "MB",
                           "requests by kind")))
        for side, values in ratios.items():
            print(f"{side}: (disk + PUT floor) / bucket median {statistics.median(values):.2f}, "
                  f"range {min(values):.2f}-{max(values):.2f} over {len(values)} runs")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
