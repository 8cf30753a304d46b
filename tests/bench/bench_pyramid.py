"""pyramid vs ome-zarr-py ``write_image`` (its default scale factors) and ngff-zarr
``to_multiscales`` + ``to_ngff_zarr``, on the same generated images: wall time and peak RSS
(process tree), 5 levels each, the same machine, all cores.

  python tests/bench/bench_pyramid.py [--sizes 8192,16384] [--volume 256,1024,1024] [--workdir DIR]

zarrmill runs with the ``local`` executor (a LocalCluster: one process per core, ~500 MB of
fixed process overhead) and with ``threads`` (one process). It adds levels 1-4 next to the
existing level 0 (what the task does); the baselines cannot
add to a store, so they rewrite level 0 as well. For an apples-to-apples row, "zarrmill rechunk +
pyramid" also copies level 0 into a new store first.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from measure import python, run_measured, table, zarrmill

OME_ZARR = """
import dask.array as da, zarr
from ome_zarr.writer import write_image
src = da.from_zarr({src!r})
group = zarr.open_group({dst!r}, mode="w", zarr_format=3)
write_image(src, group, axes={axes!r}, scale_factors=[2, 4, 8, 16])
"""

NGFF_ZARR = """
import dask.array as da, ngff_zarr as nz
src = da.from_zarr({src!r})
image = nz.to_ngff_image(src, dims={dims!r})
ms = nz.to_multiscales(image, scale_factors=[2, 4, 8, 16])
nz.to_ngff_zarr({dst!r}, ms, version="0.5")
"""


def generate(path: Path, shape: list[int], axes: str, chunks: list[int]) -> None:
    run_measured(zarrmill("task", "generate", "--set", f"output={path}", "--set", f"shape={shape}",
                          "--set", f"axes={axes}", "--set", f"chunks={chunks}", "--set", "n_blobs=2000",
                          "--set", "blob_radius=8", "--executor", "local"))


def bench_one(work: Path, label: str, shape: list[int], axes: str, chunks: list[int]) -> list[tuple]:
    src = work / f"{label}.ome.zarr"
    generate(src, shape, axes, chunks)
    rows = []

    for executor in ("local", "threads"):
        img = work / f"{label}-ours.ome.zarr"
        shutil.copytree(src, img)
        m = run_measured(zarrmill("task", "pyramid", "--set", f"input={img}", "--set", "levels=5",
                                  "--set", "z_factor=2", "--executor", executor))
        rows.append((label, f"zarrmill pyramid ({executor})", f"{m.seconds:.1f}", f"{m.peak_mb:.0f}"))
        shutil.rmtree(img)
    copy = work / f"{label}-copy.ome.zarr"
    m1 = run_measured(zarrmill("task", "rechunk", "--set", f"input={src}", "--set", f"output={copy}",
                               "--executor", "local"))
    m2 = run_measured(zarrmill("task", "pyramid", "--set", f"input={copy}", "--set", "levels=5",
                               "--set", "z_factor=2", "--executor", "local"))
    rows.append((label, "zarrmill rechunk + pyramid", f"{m1.seconds + m2.seconds:.1f}",
                 f"{max(m1.peak_mb, m2.peak_mb):.0f}"))
    shutil.rmtree(copy)
    for name, script in (("ome-zarr-py write_image", OME_ZARR), ("ngff-zarr to_multiscales", NGFF_ZARR)):
        dst = work / f"{label}-{name.split()[0]}.zarr"
        code = script.format(src=str(src / "0"), dst=str(dst), axes=axes, dims=list(axes))
        try:
            m = run_measured(python(code))
            rows.append((label, name, f"{m.seconds:.1f}", f"{m.peak_mb:.0f}"))
        except RuntimeError as err:
            rows.append((label, name, "failed", str(err).splitlines()[-1][:60]))
        shutil.rmtree(dst, ignore_errors=True)
    shutil.rmtree(src)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8192,16384", help="2D sides (uint16)")
    ap.add_argument("--volume", default="256,1024,1024", help="3D shape z,y,x (uint16)")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zm-bench-pyramid-", dir=args.workdir))  # its own folder: a given --workdir is kept
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple] = []
    for side in [int(s) for s in args.sizes.split(",") if s]:
        rows += bench_one(work, f"2D {side}x{side}", [side, side], "yx", [1024, 1024])
    if args.volume:
        shape = [int(s) for s in args.volume.split(",")]
        rows += bench_one(work, "3D " + "x".join(map(str, shape)), shape, "zyx", [64, 256, 256])
    print(table(rows, ("image (uint16)", "method", "wall s", "peak RSS MB")))


if __name__ == "__main__":
    main()
