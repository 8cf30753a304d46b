"""A plate to a zipped OME-Zarr (.ozx): zarrmill writing the .ozx directly, beside what a user does
without it (zarrmill to a folder store, then Python's ``zipfile``, stored entries, ZIP64).

  python tests/bench/bench_ozx.py [--wells 8] [--grid 3] [--shape 1080,1280] [--channels 2] [--z 3] [--repeat 3]

Generates a plate (generate-plate: TIFFs and a CellVoyager-style mlf), then measures, each from a
cold start in its own process (the fastest of ``--repeat`` runs, each on a new output): wall time, peak RSS of the process tree, the peak bytes on disk
under the output's folder (sampled every 0.2 s: the input is not counted) and the archive's size
and entries. The folder + zipfile path holds the data twice at its peak (the folder and the zip);
the direct path holds it once plus one shard in flight."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from measure import peak_rss_until_exit, table, zarrmill

ZIP_FOLDER = r"""
import os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
    for folder, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(folder, name)
            zf.write(path, os.path.relpath(path, src))
"""


def disk_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def best(repeat: int, run) -> tuple[float, float, int]:
    """The fastest of ``repeat`` runs of ``run(i)`` (each on a new output), with its memory and disk."""
    return min((run(i) for i in range(repeat)), key=lambda r: r[0])


def measured(cmd: list[str], watch: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS MB, peak bytes under ``watch``)."""
    peak_disk = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak_disk[0] = max(peak_disk[0], disk_bytes(watch))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler.start()
    peak = peak_rss_until_exit(popen)
    seconds = time.perf_counter() - t0
    stop.set()
    sampler.join()
    peak_disk[0] = max(peak_disk[0], disk_bytes(watch))
    out = popen.stdout.read() if popen.stdout else ""
    if popen.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({popen.returncode}):\n{out[-3000:]}")
    return seconds, peak / 2**20, peak_disk[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wells", type=int, default=8)
    ap.add_argument("--grid", type=int, default=3)
    ap.add_argument("--shape", default="1080,1280")
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--z", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows_letters = "BCDEFG"
    wells = [f"{rows_letters[i // 10]}{i % 10 + 2:02d}" for i in range(args.wells)]
    with tempfile.TemporaryDirectory(prefix="bench-ozx-") as tmp:
        tmp = Path(tmp)
        raw = tmp / "raw"
        subprocess.run(zarrmill("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                                "--set", f"wells=[{','.join(wells)}]", "--set", f"grid=[{args.grid},{args.grid}]",
                                "--set", f"shape=[{args.shape}]", "--set", f"channels={args.channels}",
                                "--set", f"z_planes={args.z}"), check=True, capture_output=True)
        raw_bytes = disk_bytes(raw)
        rows = []

        def direct_run(i: int) -> tuple[float, float, int]:
            where = tmp / f"direct{i}"
            where.mkdir()
            return measured(zarrmill("task", "ingest", "--set", f"input={raw}",
                                     "--set", f"output={where / 'plate.ozx'}"), where)

        def folder_run(i: int) -> tuple[float, float, int]:
            where = tmp / f"folder{i}"
            where.mkdir()
            return measured(zarrmill("task", "ingest", "--set", f"input={raw}",
                                     "--set", f"output={where / 'plate.zarr'}"), where)

        def zip_run(i: int) -> tuple[float, float, int]:
            where = tmp / f"folder{i}"
            (where / "plate.zip").unlink(missing_ok=True)
            return measured([sys.executable, "-c", ZIP_FOLDER, str(where / "plate.zarr"), str(where / "plate.zip")],
                            where)

        s, rss, disk = best(args.repeat, direct_run)
        archive = tmp / "direct0" / "plate.ozx"
        with zipfile.ZipFile(archive) as zf:
            entries = len(zf.infolist())
        rows.append(("zarrmill ingest -> plate.ozx", f"{s:.1f}", f"{rss:.0f}", f"{disk / 1e6:.0f}",
                     f"{archive.stat().st_size / 1e6:.0f}", entries))
        s1, rss1, disk1 = best(args.repeat, folder_run)
        s2, rss2, disk2 = best(args.repeat, zip_run)
        with zipfile.ZipFile(tmp / "folder0" / "plate.zip") as zf:
            entries2 = len(zf.infolist())
        rows.append(("zarrmill ingest -> plate.zarr", f"{s1:.1f}", f"{rss1:.0f}", f"{disk1 / 1e6:.0f}", "-", "-"))
        rows.append(("  then zipfile (stored, ZIP64)", f"{s2:.1f}", f"{rss2:.0f}", f"{disk2 / 1e6:.0f}",
                     f"{(tmp / 'folder0' / 'plate.zip').stat().st_size / 1e6:.0f}", entries2))
        rows.append(("  folder + zip, together", f"{s1 + s2:.1f}", f"{max(rss1, rss2):.0f}",
                     f"{max(disk1, disk2) / 1e6:.0f}", "-", "-"))
        print(f"plate: {args.wells} wells x {args.grid}x{args.grid} fields x {args.channels} channels x {args.z} z, "
              f"{args.shape} px; input {raw_bytes / 1e6:.0f} MB on disk; {os.cpu_count()} cores")
        print(table(rows, ("run", "seconds", "peak RSS MB", "peak disk MB", "archive MB", "entries")))
        shutil.rmtree(tmp / "raw")


if __name__ == "__main__":
    main()
