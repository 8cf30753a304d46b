"""Sparse acquisitions: a metadata-only CellVoyager QC measurement, and a sparse plate against the
same plate made dense.

  python tests/bench/bench_sparse.py [--before DIR] [--wells 4] [--grid 4] [--z 31] [--channels 4]
                                     [--timepoints 4] [--shape 2160,2560]

1. **Metadata only** (issue #37): 4 wells x 16 fields x 31 z, each well imaged with its own single
   channel at its own time point (``generate-plate sparse: qc``), every TIFF gone (an mlf copied
   from an instrument without its images), the mrf saying 2160 x 2560 planes; ``ingest
   missing: zeros``. Before (``--before``: a checkout of an earlier zarrmill, run from its ``tasks``
   folder) every well was a 4 time point x 4 channel grid of zeros pushed through the writer; now
   each well is 1 x 1 and a missing plane costs no pixel work.
2. **Sparse vs dense** (with pixels, small planes): the same plate as ``sparse: qc`` and as
   ``sparse: none`` (every well all channels and time points), ingested; the sparse one writes only
   what was acquired.

Wall time, peak RSS of the process tree, files and bytes written."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from measure import files_and_bytes, run_measured, table, zarrmill  # noqa: E402


def generate(out: Path, args, sparse: str, shape: str) -> None:
    run_measured(zarrmill("task", "generate-plate", "--set", f"output={out}", "--set", "format=cellvoyager",
                          "--set", f"wells=[{','.join(WELLS[:args.wells])}]", "--set", f"grid=[{args.grid},{args.grid}]",
                          "--set", f"z_planes={args.z}", "--set", f"channels={args.channels}",
                          "--set", f"timepoints={args.timepoints}", "--set", f"shape=[{shape}]",
                          "--set", f"sparse={sparse}", "--set", "blobs_per_field=5"))


def metadata_only(folder: Path, shape: tuple[int, int]) -> None:
    for f in folder.glob("*.tif"):
        f.unlink()
    mrf = folder / "MeasurementDetail.mrf"
    text = re.sub(r'bts:HorizontalPixels="\d+"', f'bts:HorizontalPixels="{shape[1]}"', mrf.read_text())
    mrf.write_text(re.sub(r'bts:VerticalPixels="\d+"', f'bts:VerticalPixels="{shape[0]}"', text))


def ingest(folder: Path, out: Path, env_python: list[str] | None = None) -> tuple:
    cmd = zarrmill("task", "ingest", "--set", f"input={folder}", "--set", f"output={out}", "--set", "missing=zeros")
    if env_python:
        cmd = env_python + cmd[1:]
    m = run_measured(cmd)
    files, nbytes = files_and_bytes(out)
    return round(m.seconds, 1), round(m.peak_mb), files, round(nbytes / 1e6, 2)


WELLS = [f"{r}{c:02d}" for r in "BCDEFG" for c in range(3, 11)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="a checkout of an earlier zarrmill (its tasks/ folder is imported as zarrmill)")
    ap.add_argument("--wells", type=int, default=4)
    ap.add_argument("--grid", type=int, default=4)
    ap.add_argument("--z", type=int, default=31)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--timepoints", type=int, default=4)
    ap.add_argument("--shape", default="2160,2560")
    args = ap.parse_args()
    big = tuple(int(v) for v in args.shape.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-sparse-") as tmp:
        tmp = Path(tmp)
        generate(tmp / "qc", args, "qc", "8,8")
        metadata_only(tmp / "qc", big)
        rows = [("metadata only, now",) + ingest(tmp / "qc", tmp / "now.zarr")]
        if args.before:
            shim = tmp / "before-path"
            shim.mkdir()
            (shim / "zarrmill").symlink_to(Path(args.before).resolve() / "tasks")
            env = dict(os.environ, PYTHONPATH=str(shim))
            os.environ.update(env)  # the child imports the earlier zarrmill first
            rows.insert(0, ("metadata only, before",) + ingest(tmp / "qc", tmp / "before.zarr"))
            os.environ.pop("PYTHONPATH")
        print(f"\n{args.wells} wells x {args.grid ** 2} fields x {args.z} z, {big[0]} x {big[1]} planes, no TIFFs, "
              "missing: zeros")
        print(table(rows, ("ingest", "s", "peak MB", "files", "MB written")))
        rows = []
        for sparse in ("qc", "none"):
            generate(tmp / f"px-{sparse}", args, sparse, "256,256")
            rows.append((f"sparse: {sparse}",) + ingest(tmp / f"px-{sparse}", tmp / f"px-{sparse}.zarr"))
        print("\nthe same plate with pixels (256 x 256 planes): sparse (qc) vs dense (none)")
        print(table(rows, ("plate", "s", "peak MB", "files", "MB written")))
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
