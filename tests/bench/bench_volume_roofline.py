"""Roofline of the volume job (issue 53): each phase's floor on this machine beside where zarrmill's
one-pass run spends its time, and EuBI-Bridge's whole run, in one run.

  python tests/bench/bench_volume_roofline.py [--shape 64,2048,2048] [--repeat 3]
                                              [--eubi .venv-eubi/bin/eubi] [--workdir DIR]

Floors, on the volume of bench_volume.py (same generator), each on 2 threads as the run has 2 cores:
- start-up: a bare interpreter, and the imports a run cannot skip (zarrmill's command line, ingest
  and tensorstore; tensorstore imports ml_dtypes, whose 0.7.0 takes ~1 s: pyproject pins < 0.7);
- read: the TIFF's pixels by ``os.preadv`` into one buffer (the page cache holds the file, as in
  the run);
- downsample: zarrmill's ``downsample`` (mean) of every level from the one above, in memory;
- encode: Blosc at the run's codec (LZ4 5, bitshuffle) of every level's chunks, through numcodecs,
  one chunk per call, as the writer does;
- write: the encoded bytes as one file per chunk (page cache, no fsync, as the run).
The sum of the floors is what a perfect pipeline on 2 cores would still cost if nothing overlapped.
"Actual" runs the command line in a child with timers around the same phases (thread-seconds: two
workers run at once, so a phase's time may exceed its share of the wall time), plus the tail spent
reading levels back. Best of ``--repeat`` alternating runs for every wall time."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tifffile
from bench_volume import make_volume
from measure import compile_zarrmill, files_and_bytes, run_measured, table, zarrmill

REPO = Path(__file__).resolve().parents[2]
THREADS = 2

# the child: zarrmill's command line with timers around each phase, thread-seconds per phase as JSON
PROBE = r"""
import json, sys, threading, time
T0 = time.perf_counter()
acc, lock, first = {}, threading.Lock(), []
def wrap(owner, name, label):
    f = getattr(owner, name)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            with lock:
                acc[label] = acc.get(label, 0.0) + time.perf_counter() - t
                first.append(t - T0)
    setattr(owner, name, timed)
from zarrmill.runtime.front import cli
from zarrmill import ingest, pyramid
from zarrmill.io.storage import arrays
from zarrmill.io.readers import volume
wrap(volume.RawPixels, "__getitem__", "read")
wrap(pyramid, "downsample", "downsample")
wrap(arrays, "write_region", "encode + write")
wrap(arrays, "read_region", "read back (decode)")
wrap(pyramid, "run_level_unit", "read-back units")
for module in (ingest, pyramid):
    module.write_region, module.read_region = arrays.write_region, arrays.read_region
sys.argv = ["zarrmill"] + sys.argv[1:]
code = cli.main()
acc["start-up (to the first unit)"] = min(first) if first else 0.0
acc["wall"] = time.perf_counter() - T0
print("PHASES " + json.dumps(acc))
sys.exit(code)
"""


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def floors(src: Path, vol: np.ndarray, work: Path, repeat: int) -> tuple[dict[str, float], int]:
    """Each phase's floor in seconds on 2 threads, and the bytes the encode floor writes."""
    from numcodecs import Blosc

    from zarrmill.io.storage.downsample import downsample

    out: dict[str, float] = {}
    py = sys.executable
    out["start-up: bare interpreter"] = best_of(lambda: subprocess.run([py, "-c", "pass"], check=True), repeat)
    imports = "import zarrmill.runtime.front.cli, zarrmill.ingest, tensorstore"
    out["start-up: + the imports a run needs"] = best_of(lambda: subprocess.run([py, "-c", imports], check=True), repeat)
    offset = int(tifffile.TiffFile(src).series[0].dataoffset)
    buf = np.empty(vol.shape, vol.dtype)
    planes = np.array_split(np.arange(vol.shape[0]), THREADS)

    def read(zs: np.ndarray) -> None:
        with open(src, "rb", buffering=0) as fh:
            part = buf[zs[0]:zs[-1] + 1]
            os.preadv(fh.fileno(), [memoryview(part.reshape(-1).view(np.uint8))], offset + zs[0] * vol[0].nbytes)

    with ThreadPoolExecutor(THREADS) as pool:
        out["read TIFF (preadv, page cache)"] = best_of(lambda: list(pool.map(read, planes)), repeat)
        assert np.array_equal(buf, vol)
        levels = [vol]
        factors = [(1, 2, 2), (2, 2, 2), (2, 2, 2), (2, 2, 2), (2, 2, 2)]

        def down_all() -> None:
            levels[1:] = []
            for f in factors:  # each level split in z between the threads, as regions are
                prev = levels[-1]
                step = max(f[0], prev.shape[0] // THREADS // f[0] * f[0])
                parts = pool.map(lambda z: downsample(prev[z:z + step], f, "mean"), range(0, prev.shape[0], step))
                levels.append(np.concatenate(list(parts)))

        out["downsample (every level)"] = best_of(down_all, repeat)
        codec = Blosc(cname="lz4", clevel=5, shuffle=Blosc.BITSHUFFLE)
        chunks = [np.ascontiguousarray(lv[:, y:y + 256, x:x + 256]) for lv in levels
                  for y in range(0, lv.shape[1], 256) for x in range(0, lv.shape[2], 256)]
        encoded: list[bytes] = []
        out["encode (Blosc LZ4 5 bitshuffle)"] = best_of(lambda: encoded.__setitem__(slice(None), pool.map(codec.encode, chunks)), repeat)
        folder = work / "floor-write"

        def write_all() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            list(pool.map(lambda ib: (folder / str(ib[0])).write_bytes(ib[1]), enumerate(encoded)))

        out["write (one file per chunk)"] = best_of(write_all, repeat)
        shutil.rmtree(folder, ignore_errors=True)
    return out, sum(len(b) for b in encoded)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="64,2048,2048")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--eubi", default=str(REPO / ".venv-eubi" / "bin" / "eubi"))
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    compile_zarrmill()
    work = Path(tempfile.mkdtemp(prefix="bench-roofline-", dir=a.workdir))
    try:
        vol = make_volume(shape)
        src = work / "vol.tif"
        tifffile.imwrite(src, vol, imagej=True, resolution=(2.0, 2.0), metadata={"axes": "ZYX", "spacing": 1.0})
        print(f"input: {src.stat().st_size / 1e6:.0f} MB TIFF, {shape} uint16; {os.cpu_count()} CPUs "
              f"(load {os.getloadavg()[0]:.1f}: the machine may be shared)", flush=True)
        floor, floor_bytes = floors(src, vol, work, a.repeat)
        del vol
        runs: dict[str, list[tuple[float, float, int]]] = {"zarrmill": [], "EuBI-Bridge": []}
        phases: list[dict[str, float]] = []
        have_eubi = Path(a.eubi).exists()
        for r in range(a.repeat):
            out = work / f"zm{r}"
            cmd = [sys.executable, "-c", PROBE, "task", "ingest", "--set", f"input={src}", "--set",
                   f"output={out / 'vol.zarr'}", "--set", "pyramid=true", "--set", "min_size=64"]
            m = run_measured(cmd)
            phases.append(json.loads(m.output.split("PHASES ", 1)[1].splitlines()[0]))
            runs["zarrmill"].append((m.seconds, m.peak_mb, files_and_bytes(out)[1]))
            shutil.rmtree(out)
            if have_eubi:
                out = work / f"eubi{r}"
                m = run_measured([a.eubi, "to_zarr", str(src), "--output_path", str(out)])
                runs["EuBI-Bridge"].append((m.seconds, m.peak_mb, files_and_bytes(out)[1]))
                shutil.rmtree(out)
        best = min(phases, key=lambda ph: ph["wall"])
        rows = [(name, f"{sec:.2f}", f"{best.get(key, 0.0):.2f}" if key else "") for name, sec, key in [
            (n, s, {"read TIFF (preadv, page cache)": "read", "downsample (every level)": "downsample",
                    "encode (Blosc LZ4 5 bitshuffle)": "encode + write"}.get(n)) for n, s in floor.items()]]
        rows.insert(1, ("start-up: to the first unit (actual)", "", f"{best['start-up (to the first unit)']:.2f}"))
        rows.append(("read back + tail (read-back units)", "0", f"{best.get('read-back units', 0.0):.2f}"))
        cpu = sum(v for k, v in floor.items() if not k.startswith("start-up"))
        rows.append(("sum of floors (imports + phases, no overlap)", f"{floor['start-up: + the imports a run needs'] + cpu:.2f}",
                     f"{best['wall']:.2f} (wall)"))
        print()
        print(table(rows, ("phase", "floor s (2 threads)", "zarrmill actual s (thread-s)")))
        print(f"\nencode floor writes {floor_bytes / 1e6:.0f} MB")
        print()
        summary = []
        for name, rs in runs.items():
            if rs:
                s, peak, nbytes = min(rs)
                med = sorted(x[0] for x in rs)[len(rs) // 2]
                summary.append((name, f"{s:.2f}", f"{med:.2f}", f"{peak:.0f}", f"{nbytes / 1e6:.0f}"))
        if len(summary) == 2:
            summary[0] += (f"{float(summary[1][1]) / float(summary[0][1]):.2f}x",)
            summary[1] += ("1.00x",)
        print(table(summary, ("whole run", "best s", "median s", "peak MB", "MB written", "vs EuBI")[:len(summary[0])]))
        if not have_eubi:
            print(f"EuBI-Bridge left out: no {a.eubi} (see bench_volume.py)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
