"""Writing to an S3 server: zarrmill beside a floor that PUTs the same bytes through a plain client.

  python tests/bench/bench_object_store.py [--wells 4] [--grid 3] [--z 5] [--shape 540,640] [--repeat 1]

Starts moto's S3 server on 127.0.0.1 (tests/s3_server.py, from .venv-moto), generates a CellVoyager
plate, and measures:

- zarrmill ``ingest layout: well`` (level 0, pyramid, ROI tables, metadata) to ``s3://`` and to
  local disk, default executor: wall time, peak RSS of the process tree, objects and bytes, and the
  requests the server saw, by kind (from the server's request log);
- ``ingest`` (per FOV) then ``pyramid`` in place, to ``s3://``;
- the floor: PUT objects of exactly the sizes zarrmill wrote, as many at once as zarrmill's writers
  (16 in flight), with s3fs and no encoding or reading at all: the bytes any converter must send.

The ratios: the PUT floor's time over zarrmill's (1.0 = as fast as sending the bytes), and the
disk run plus the PUT floor over the bucket run (converting to disk, then uploading the objects
with a plain client: what writing to the bucket directly should beat), with the requests the
server saw per object written."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from measure import run_measured, table, zarrmill

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3_server import S3Server  # noqa: E402

REQUEST = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) (\S+)[^"]*" (\d{3})')


def requests_since(log: Path, offset: int) -> tuple[dict[str, int], int]:
    """Requests the server logged since ``offset``, by kind; refused or missing (4xx) counted apart
    as ``4xx`` (a GET of a key that is not there is a request too)."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    kinds: dict[str, int] = {}
    for method, path, status in REQUEST.findall(text):
        kind = method + (" list" if method == "GET" and ("list-type" in path or path.rstrip("/").count("/") <= 1
                                                          and "?" in path) else "")
        kinds[kind] = kinds.get(kind, 0) + 1
        if status.startswith("4"):
            kinds["4xx"] = kinds.get("4xx", 0) + 1
    return kinds, log.stat().st_size


def object_sizes(server: S3Server, prefix: str) -> list[int]:
    fs = server.fs()
    return [info["size"] for info in fs.find(prefix + "/", detail=True).values()]


def floor(server: S3Server, bucket: str, sizes: list[int], in_flight: int = 16) -> float:
    fs = server.fs()
    payload = os.urandom(max(sizes))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(lambda i: fs.pipe_file(f"{bucket}/floor/{i}", payload[:sizes[i]]), range(len(sizes))))
    return time.perf_counter() - t0


def generate_plate(raw: Path, n_wells: int, grid: int = 3, shape: str = "540,640", z: int = 5, channels: int = 2) -> None:
    """The benchmark's CellVoyager folder: ``n_wells`` wells (B03, B04, ... row by row)."""
    wells = ",".join(f"{'BCDEFG'[i // 10]}{3 + i % 10:02d}" for i in range(n_wells))
    run_measured(zarrmill("task", "generate-plate", "--set", f"output={raw}", "--set", f"wells=[{wells}]",
                          "--set", f"grid=[{grid},{grid}]", "--set", f"shape=[{shape}]",
                          "--set", f"z_planes={z}", "--set", f"channels={channels}"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wells", type=int, default=4)
    ap.add_argument("--grid", type=int, default=3)
    ap.add_argument("--z", type=int, default=5)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--shape", default="540,640")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    log = work / "moto.log"
    server = S3Server().start(log)
    os.environ.update(server.env())
    try:
        raw = work / "raw"
        generate_plate(raw, args.wells, args.grid, args.shape, args.z, args.channels)
        rows = []
        for rep in range(args.repeat):
            bucket = server.make_bucket(f"bench-{rep}")
            offset = log.stat().st_size
            s3_run = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set",
                                           f"output=s3://{bucket}/well.ome.zarr", "--set", "layout=well"))
            kinds, offset = requests_since(log, offset)
            sizes = object_sizes(server, f"{bucket}/well.ome.zarr")
            disk = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set",
                                         f"output={work / f'well-{rep}.ome.zarr'}", "--set", "layout=well"))
            t_floor = floor(server, bucket, sizes)
            offset = log.stat().st_size
            t0 = time.perf_counter()
            fov = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set",
                                        f"output=s3://{bucket}/fov.ome.zarr"))
            pyr = run_measured(zarrmill("task", "pyramid", "--set", f"input=s3://{bucket}/fov.ome.zarr"))
            t_fov = time.perf_counter() - t0
            kinds_fov, _ = requests_since(log, offset)
            fov_sizes = object_sizes(server, f"{bucket}/fov.ome.zarr")
            t_floor_fov = floor(server, bucket, fov_sizes)
            mb = sum(sizes) / 1e6
            per_object = sum(kinds.values()) / len(sizes)
            per_object_fov = sum(kinds_fov.values()) / len(fov_sizes)
            rows += [
                ("ingest layout well -> s3", f"{s3_run.seconds:.1f}", f"{s3_run.peak_mb:.0f}", len(sizes), f"{mb:.1f}",
                 " ".join(f"{k}:{v}" for k, v in sorted(kinds.items())), f"{per_object:.2f}",
                 f"{t_floor / s3_run.seconds:.2f}", f"{(disk.seconds + t_floor) / s3_run.seconds:.2f}"),
                ("same -> local disk", f"{disk.seconds:.1f}", f"{disk.peak_mb:.0f}", "", "", "", "", "", ""),
                ("floor: PUT the same sizes, 16 in flight", f"{t_floor:.1f}", "", len(sizes), f"{mb:.1f}",
                 f"PUT:{len(sizes)}", "1.00", "1.00", ""),
                ("ingest fov + pyramid -> s3", f"{t_fov:.1f}", f"{max(fov.peak_mb, pyr.peak_mb):.0f}", len(fov_sizes),
                 f"{sum(fov_sizes) / 1e6:.1f}", " ".join(f"{k}:{v}" for k, v in sorted(kinds_fov.items())),
                 f"{per_object_fov:.2f}", f"{t_floor_fov / t_fov:.2f}", ""),
                ("floor for it", f"{t_floor_fov:.1f}", "", len(fov_sizes), f"{sum(fov_sizes) / 1e6:.1f}",
                 f"PUT:{len(fov_sizes)}", "1.00", "1.00", ""),
            ]
        print(table(rows, ("run", "wall s", "peak MB", "objects", "MB", "requests by kind", "requests/object",
                           "PUT floor/zarrmill", "(disk + PUT floor)/bucket")))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
