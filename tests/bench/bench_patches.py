"""Cuboids around many points from a large volume: naive per-point reads vs patch-extract vs the
floor, for two input chunkings; then PatchDataset random access vs one TIFF per cuboid.

  python tests/bench/bench_patches.py [--shape 400,1400,1400] [--points 100000] [--workdir DIR]

(a) naive: for each point in file order, slice the cuboid from zarr (and from dask.array, as
    cellfinder did), timed on a subset and reported as cuboids/s;
(b) zarrmill ``patch-extract`` (local executor, all cores) on every point, wall time incl. start-up;
(c) floor: one sequential read of every plane that holds a point, whole chunks decoded once.
Cuboid 20x50x50 at the data resolution, uint16, points uniform in the volume.
"""
from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from measure import run_measured, table, zarrmill

CUBOID = (20, 50, 50)


def generate(path: Path, shape, chunks) -> None:
    run_measured(zarrmill("task", "generate", "--set", f"output={path}", "--set", f"shape={list(shape)}",
                          "--set", "axes=zyx", "--set", f"chunks={list(chunks)}", "--set", "n_blobs=4000",
                          "--set", "blob_radius=6", "--set", "unit_mb=128", "--executor", "local"))


def naive_rate(arr, pts, n: int, use_dask: bool) -> float:
    src = arr
    if use_dask:
        import dask.array as da

        src = da.from_zarr(arr)
    t = time.perf_counter()
    for z, y, x in pts[:n]:
        o = (int(z - CUBOID[0] // 2), int(round(y - CUBOID[1] / 2)), int(round(x - CUBOID[2] / 2)))
        sl = tuple(slice(max(0, a), max(0, a) + c) for a, c in zip(o, CUBOID))
        block = src[sl]
        np.asarray(block.compute() if use_dask else block)
    return n / (time.perf_counter() - t)


def floor_seconds(arr, pts) -> float:
    lo = max(0, int(pts[:, 0].min()) - CUBOID[0])
    hi = min(arr.shape[0], int(pts[:, 0].max()) + CUBOID[0])
    cz = arr.chunks[0]
    t = time.perf_counter()
    for z in range(lo // cz * cz, hi, cz):
        np.asarray(arr[z:min(z + cz, hi)])
    return time.perf_counter() - t


def bench_volume(work: Path, shape, chunks, n_points: int) -> list[tuple]:
    img = work / f"vol-{chunks[0]}.ome.zarr"
    generate(img, shape, chunks)
    rng = np.random.default_rng(0)
    pts = rng.uniform(0, 1, (n_points, 3)) * np.asarray(shape)
    np.save(work / "points.npy", pts)
    arr = zarr.open_array(str(img / "0"), mode="r")
    rows = []
    label = f"chunks {'x'.join(map(str, chunks))}"
    n_naive = 300 if chunks[0] > 1 else 100
    rows.append((label, "naive per-point zarr", f"{naive_rate(arr, pts, n_naive, False):.0f}", f"(on {n_naive} points)"))
    rows.append((label, "naive per-point dask", f"{naive_rate(arr, pts, n_naive // 2, True):.0f}", f"(on {n_naive // 2} points)"))
    out = work / "patches.zarr"
    shutil.rmtree(out, ignore_errors=True)
    m = run_measured(zarrmill("task", "patch-extract", "--set", f"input={img}", "--set", f"output={out}",
                              "--set", f"points={work / 'points.npy'}", "--set", f"cuboid={list(CUBOID)}",
                              "--set", "edge=pad", "--executor", "local"))
    rows.append((label, "zarrmill patch-extract", f"{n_points / m.seconds:.0f}",
                 f"{n_points} points in {m.seconds:.1f} s, peak RSS {m.peak_mb:.0f} MB"))
    f = floor_seconds(arr, pts)
    rows.append((label, "floor: read planes once", f"{n_points / f:.0f}", f"{f:.1f} s"))
    shutil.rmtree(img)
    return rows


def bench_dataset(work: Path, n: int = 2000) -> list[tuple]:
    import tifffile

    from zarrmill.io.training.patch_dataset import PatchDataset

    ds = PatchDataset(work / "patches.zarr")
    tif_dir = work / "cuboids"
    tif_dir.mkdir(exist_ok=True)
    for i in range(n):
        tifffile.imwrite(tif_dir / f"{i}.tif", ds[i][0])
    order = random.Random(1).sample(range(n), n)
    t = time.perf_counter()
    for i in order:
        ds[i]
    t_ds = time.perf_counter() - t
    t = time.perf_counter()
    for i in order:
        tifffile.imread(tif_dir / f"{i}.tif")
    t_tif = time.perf_counter() - t
    return [("PatchDataset random access", f"{n / t_ds:.0f}"), ("one TIFF per cuboid (cellfinder)", f"{n / t_tif:.0f}")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="400,1400,1400")
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    work = Path(tempfile.mkdtemp(prefix="zm-bench-patches-", dir=args.workdir))  # its own folder: a given --workdir is kept
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for chunks in ((32, 256, 256), (1, shape[1], shape[2])):
        rows += bench_volume(work, shape, chunks, args.points)
    print(f"volume {'x'.join(map(str, shape))} uint16, cuboid {'x'.join(map(str, CUBOID))}")
    print(table(rows, ("input", "method", "cuboids/s", "note")))
    print()
    print(table(bench_dataset(work), ("reader", "patches/s")))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
