"""ingest of a generated CellVoyager-like plate vs the floor and vs a naive loop.

  python tests/bench/bench_ingest.py [--wells 4] [--grid 3] [--z 5] [--channels 2] [--shape 1080,1280]

- floor: read every TIFF, compress every byte with the same Blosc codec and write it (one file
  per plane, no metadata) on all cores: the bytes any converter must move; none can beat it;
- naive: one process, for each field tifffile.imread every plane, stack, ome-zarr-py write_image
  (level 0 only, same codec);
- zarrmill: ``zarrmill task ingest`` with the ``local`` executor (LocalCluster, one process per
  core, ~4 s to start) and ``threads`` (one process); plate + metadata written.
Goals: zarrmill >= 0.7x the floor's throughput, >= 2x the naive loop.
"""
from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

from measure import python, run_measured, table, zarrmill

FLOOR = """
import os, glob, time, tifffile, numcodecs
from multiprocessing import Pool
codec = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE)
out_dir = {out!r}
os.makedirs(out_dir, exist_ok=True)
def one(path):
    data = codec.encode(tifffile.imread(path))
    with open(os.path.join(out_dir, os.path.basename(path) + ".blosc"), "wb") as fh:
        fh.write(data)
    return len(data)
files = sorted(glob.glob({folder!r} + "/*.tif"))
with Pool(os.cpu_count()) as pool:
    out = sum(pool.map(one, files, chunksize=4))
print("compressed bytes written", out)
"""

NAIVE = """
import numpy as np, tifffile, zarr
from ome_zarr.writer import write_image
from zarrmill.io.readers.cellvoyager import read_cellvoyager
from zarrmill.io.ngff.hcs import field_path
acq = read_cellvoyager({folder!r})
for (r, c, f), planes in acq.fields().items():
    stack = np.zeros((acq.n_c, acq.n_z) + acq.image_shape_yx, dtype=acq.dtype)
    for pl in planes:
        stack[pl.c, pl.z] = tifffile.imread(pl.path)
    group = zarr.open_group({out!r} + "/" + field_path(r, c, f, acq), mode="w", zarr_format=3)
    write_image(stack, group, axes="czyx", scale_factors=[],
                storage_options=dict(chunks=(1, 1) + acq.image_shape_yx,
                compressors=zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")))
"""


def _steady(output: str, fallback: float) -> str:
    """zarrmill prints '(units X s, Y MB/s)'; baselines have no start-up to separate."""
    match = re.search(r"units [0-9.]+s, ([0-9.]+) MB/s", output)
    return match.group(1) if match else f"{fallback:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wells", type=int, default=4)
    ap.add_argument("--grid", type=int, default=3)
    ap.add_argument("--z", type=int, default=5)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--shape", default="1080,1280")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zm-bench-ingest-", dir=args.workdir))  # its own folder: a given --workdir is kept
    raw = work / "raw"
    wells = [f"{'BCDEFG'[i % 6]}{3 + i // 6:02d}" for i in range(args.wells)]
    run_measured(zarrmill("task", "generate-plate", "--set", f"output={raw}", "--set", f"wells={wells}",
                          "--set", f"grid=[{args.grid},{args.grid}]", "--set", f"z_planes={args.z}",
                          "--set", f"channels={args.channels}", "--set", f"shape=[{args.shape}]",
                          "--executor", "local"))
    files = list(raw.glob("*.tif"))
    mb = sum(f.stat().st_size for f in files) / 1e6
    floor = run_measured(python(FLOOR.format(folder=str(raw), out=str(work / "floor-out"))))
    naive = run_measured(python(NAIVE.format(folder=str(raw), out=str(work / "naive.zarr"))))
    runs = [("floor: read + compress + write, all cores", floor), ("naive: tifffile + ome-zarr write_image", naive)]
    for executor in ("local", "threads"):
        out = work / f"plate-{executor}.zarr"
        runs.append((f"zarrmill ingest ({executor})", run_measured(zarrmill(
            "task", "ingest", "--set", f"input={raw}", "--set", f"output={out}", "--executor", executor))))
    rows = [(name, f"{m.seconds:.1f}", f"{mb / m.seconds:.0f}", _steady(m.output, mb / m.seconds),
             f"{m.peak_mb:.0f}", f"{floor.seconds / m.seconds:.2f}x", f"{naive.seconds / m.seconds:.2f}x")
            for name, m in runs]
    print(f"{len(files)} TIFFs, {mb:.0f} MB")
    print(table(rows, ("method", "wall s", "MB/s", "steady MB/s", "peak RSS MB", "vs floor", "vs naive")))
    print("steady MB/s: zarrmill's units phase only (without start-up, planning and metadata), "
          "i.e. the rate a large plate converges to")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
