"""Reading a whole well (and a whole plate) at every pyramid level, three layouts side by side:

  python tests/bench/bench_reshard.py [--grid 9,8] [--shape 540,640] [--channels 3] [--plate-wells 96]

- per-FOV: the plate as ingested, one image (+ pyramid) per field of view; reading a well reads
  every FOV's array at that level and places it by its translation;
- fused (Fractal-style): one image per well, FOV-sized chunks at every level, no shards;
- resharded: ``zarrmill task reshard`` (FOV-aligned shards at level 0, large shards below).
For each level: time to read the whole well into numpy (warm page cache, median of 3; and cold,
after dropping the page cache, when run as root), files on disk and bytes. Then a 96-well plate
(2x2 FOVs per well) read whole at its lowest level: per-FOV vs the plate overview image.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from measure import drop_caches, files_and_bytes, run_measured, table, zarrmill


def sh(*args: str) -> None:
    run_measured(zarrmill(*args))


def per_fov_reader(plate: Path, well: str, level: str):
    """Read every FOV of a well at a level and place it on a canvas (what a viewer must do)."""
    import json

    wattrs = json.loads((plate / well / "zarr.json").read_text())["attributes"]["ome"]["well"]
    fovs = [im["path"] for im in wattrs["images"] if im["path"].isdigit()]
    def read() -> np.ndarray:
        parts = []
        for f in fovs:
            meta = json.loads((plate / well / f / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
            ds = meta["datasets"][int(level)]
            cts = {c["type"]: c[c["type"]] for c in ds["coordinateTransformations"]}
            arr = zarr.open_array(str(plate / well / f / level), mode="r")
            parts.append((cts.get("translation", [0] * arr.ndim), cts["scale"], arr[:]))
        h = max(int(round(t[-2] / s[-2])) + a.shape[-2] for t, s, a in parts)
        w = max(int(round(t[-1] / s[-1])) + a.shape[-1] for t, s, a in parts)
        out = np.zeros(parts[0][2].shape[:-2] + (h, w), parts[0][2].dtype)
        for t, s, a in parts:
            y, x = int(round(t[-2] / s[-2])), int(round(t[-1] / s[-1]))
            out[..., y:y + a.shape[-2], x:x + a.shape[-1]] = a
        return out
    return read, [plate / well / f / level for f in fovs]


def timed(read, cold: bool) -> float:
    if cold:
        if not drop_caches():
            return float("nan")
        t0 = time.perf_counter()
        read()
        return time.perf_counter() - t0
    read()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        read()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fused_copy(src_image: Path, dst_image: Path, fov_yx: tuple[int, int]) -> None:
    """Fractal-style: the same well pixels, FOV-sized chunks at every level, no shards."""
    import shutil

    dst_image.mkdir(parents=True)
    shutil.copy(src_image / "zarr.json", dst_image / "zarr.json")
    for level in sorted(p.name for p in src_image.iterdir() if p.name.isdigit()):
        src = zarr.open_array(str(src_image / level), mode="r")
        chunks = (1,) * (src.ndim - 2) + tuple(min(c, n) for c, n in zip(fov_yx, src.shape[-2:]))
        dst = zarr.create_array(str(dst_image / level), shape=src.shape, dtype=src.dtype, chunks=chunks,
                                compressors=zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"))
        dst[:] = src[:]


def bench_well(work: Path, grid: tuple[int, int], shape: tuple[int, int], channels: int) -> list[tuple]:
    raw, plate = work / "raw", work / "plate.zarr"
    sh("task", "generate-plate", "--set", f"output={raw}", "--set", "wells=[B03]",
       "--set", f"grid=[{grid[0]},{grid[1]}]", "--set", f"shape=[{shape[0]},{shape[1]}]",
       "--set", f"channels={channels}", "--executor", "local")
    sh("task", "ingest", "--set", f"input={raw}", "--set", f"output={plate}", "--executor", "local")
    sh("task", "pyramid", "--set", f"input={plate}", "--set", "min_size=64", "--executor", "local")
    sh("task", "reshard", "--set", f"input={plate}", "--set", f"output={work / 'wells.zarr'}", "--set", "min_size=64",
       "--executor", "local")
    well = work / "wells.zarr" / "B" / "03" / "well"
    fused = work / "fused" / "well"
    fused_copy(well, fused, shape)
    n_levels = len([p for p in (plate / "B" / "03" / "0").iterdir() if p.name.isdigit()])
    rows = []
    for level in range(n_levels):
        lv = str(level)
        fov_read, fov_paths = per_fov_reader(plate, "B/03", lv)
        layouts = {
            "per-FOV": (fov_read, fov_paths),
            "fused (FOV chunks)": (lambda: zarr.open_array(str(fused / lv), mode="r")[:], [fused / lv]),
            "resharded": (lambda: zarr.open_array(str(well / lv), mode="r")[:], [well / lv]),
        }
        base = {}
        for name, (read, paths) in layouts.items():
            files = sum(files_and_bytes(p)[0] for p in paths)
            nbytes = sum(files_and_bytes(p)[1] for p in paths)
            warm, cold = timed(read, False), timed(read, True)
            base[name] = (warm, cold)
            rows.append((lv, name, f"{warm * 1e3:.1f}", f"{cold * 1e3:.1f}", files, f"{nbytes / 1e6:.2f}",
                         f"{base['per-FOV'][0] / warm:.1f}x", f"{base['per-FOV'][1] / cold:.1f}x"))
    return rows


def bench_plate(work: Path, n_wells: int, shape: tuple[int, int]) -> list[tuple]:
    rows_letters = "ABCDEFGH"
    wells = [f"{rows_letters[i // 12]}{i % 12 + 1:02d}" for i in range(n_wells)]
    raw, plate = work / "plate-raw", work / "plate96.zarr"
    sh("task", "generate-plate", "--set", f"output={raw}", "--set", f"wells={wells}", "--set", "grid=[2,2]",
       "--set", f"shape=[{shape[0]},{shape[1]}]", "--set", "channels=1", "--executor", "local")
    sh("task", "ingest", "--set", f"input={raw}", "--set", f"output={plate}", "--executor", "local")
    sh("task", "pyramid", "--set", f"input={plate}", "--set", "min_size=64", "--executor", "local")
    wells_plate = work / "plate96-wells.zarr"
    sh("task", "reshard", "--set", f"input={plate}", "--set", f"output={wells_plate}", "--set", "overview=true",
       "--set", "overview_size=128", "--set", "min_size=64", "--executor", "local")
    low = str(len([p for p in (plate / "A" / "01" / "0").iterdir() if p.name.isdigit()]) - 1)
    def read_fovs():
        for well in wells:
            per_fov_reader(plate, f"{well[0]}/{well[1:]}", low)[0]()
    fov_files = sum(files_and_bytes(plate / w[0] / w[1:] / f / low)[0] for w in wells for f in "0123")
    ov_files = files_and_bytes(wells_plate / "overview" / "0")[0]
    read_ov = lambda: zarr.open_array(str(wells_plate / "overview" / "0"), mode="r")[:]  # noqa: E731
    out = []
    for name, read, files in (("per-FOV, lowest level", read_fovs, fov_files), ("overview image", read_ov, ov_files)):
        out.append((f"{n_wells}-well plate", name, f"{timed(read, False) * 1e3:.1f}",
                    f"{timed(read, True) * 1e3:.1f}", files))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="9,8")
    ap.add_argument("--shape", default="540,640")
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--plate-wells", type=int, default=96)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zm-bench-reshard-", dir=args.workdir))  # its own folder: a given --workdir is kept
    grid = tuple(int(x) for x in args.grid.split(","))
    shape = tuple(int(x) for x in args.shape.split(","))
    rows = bench_well(work, grid, shape, args.channels)
    print(f"one well, {grid[0]}x{grid[1]} FOVs of {shape[0]}x{shape[1]} uint16, {args.channels} channels")
    print(table(rows, ("level", "layout", "warm ms", "cold ms", "files", "MB", "warm vs per-FOV", "cold vs per-FOV")))
    if args.plate_wells:
        print()
        print(table(bench_plate(work, args.plate_wells, shape), ("plate", "read", "warm ms", "cold ms", "files")))


if __name__ == "__main__":
    main()
