"""Roofline of the screening-plate job (issue 53): each phase's floor on this machine beside where
zarrmill's ``ingest layout: well`` spends its time, and optionally Fractal's converter, in one run.

  python tests/bench/bench_plate_roofline.py [--wells 3] [--grid 2] [--z 4] [--channels 2] [--shape 2000,2000]
                                             [--repeat 3] [--peer] [--peers-python .venv-peers/bin/python]
                                             [--workdir DIR]

The CellVoyager folder of bench_peers.py (default 3 wells x 2x2 fields x 4 z x 2 channels, 2000 x
2000 uint16 TIFFs) into a well-level plate with pyramid and ROI tables. Floors, on 2 threads as the
run has 2 cores, with zarrmill's placement of the FOVs and the levels, chunks and shards the run wrote:
- start-up: a bare interpreter, and the imports a run cannot skip (as bench_volume_roofline.py);
- read: every TIFF's pixels by ``os.preadv`` into its own buffer (page cache warm, as in the run);
- compose: one copy of every pixel into its well canvas (memory bandwidth);
- downsample: zarrmill's ``downsample`` (mean) of every level from the one above, in memory;
- encode: the run's codec (``chosen_codec``: zstd 1, byte shuffle, 1 MiB blocks) on every stored
  chunk, one per call, through numcodecs; write: those bytes, one file per shard (no fsync).
"Actual": the command line in a child with timers around the same phases; in units, exclusive
thread-seconds on the pool's workers (a phase called inside another counts for itself only); plan
and finish as wall time, all they call included. Share of the wall time: a unit phase's thread-s
over the pool's threads, so shares add up to 100%. Best of ``--repeat`` (the machine may be shared)."""
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
from bench_peers import generate, write_settings
from bench_volume_roofline import best_of
from measure import compile_zarrmill, files_and_bytes, run_measured, table, zarrmill

REPO = Path(__file__).resolve().parents[2]
THREADS = 2

# the child: the command line with timers around each phase; thread-seconds per phase as JSON
PROBE = r"""
import json, os, resource, sys, threading, time
LAUNCH = float(os.environ["ROOFLINE_LAUNCH"])
acc, spans, lock, local, absorb = {}, {"threads": 0}, threading.Lock(), threading.local(), [False]
def phase(owner, name, label):  # [exclusive s (phases called inside count for themselves), inclusive s, calls]
    f = getattr(owner, name)
    def timed(*a, **k):
        if absorb[0]:
            return f(*a, **k)
        stack, t = local.__dict__.setdefault("stack", []), time.perf_counter()
        stack.append(0.0)
        try:
            return f(*a, **k)
        finally:
            dt = time.perf_counter() - t
            own = dt - stack.pop()
            if stack:
                stack[-1] += dt
            with lock:
                row = acc.setdefault(label, [0.0, 0.0, 0])
                row[0], row[1], row[2] = row[0] + own, row[1] + dt, row[2] + 1
    setattr(owner, name, timed)
def span(name, absorbs=False):  # a step's move, wall s; absorbs: phases inside count here (no units run)
    f = getattr(step_run.StepRun, name)
    def timed(*a, **k):
        spans.setdefault("start " + name, time.time() - LAUNCH)
        t, absorb[0] = time.perf_counter(), absorbs
        try:
            return f(*a, **k)
        finally:
            absorb[0] = False
            spans[name] = spans.get(name, 0.0) + time.perf_counter() - t
    setattr(step_run.StepRun, name, timed)
from zarrmill.runtime.front import cli
from zarrmill import ingest, ingest_wells, pyramid, reshard
from zarrmill.io.ngff import placement
from zarrmill.io.readers import planes
from zarrmill.io.storage import arrays
from zarrmill.runtime.execution import step_run, unit_runners
phase(planes, "read_plane_into", "read")
phase(placement, "compose", "compose")
phase(pyramid, "downsample", "downsample")
phase(arrays, "write_region", "encode + write")
phase(ingest_wells, "run_unit", "unit")
ingest.read_plane_into = ingest_wells.read_plane_into = planes.read_plane_into
reshard.compose = placement.compose
reshard.write_region = pyramid.write_region = ingest.write_region = arrays.write_region
span("run"), span("run_units"), span("plan", True), span("finish", True)
in_threads = unit_runners.run_in_threads
def pool_threads(task, params, todo, pool, opts):  # how many workers the pool has
    spans["threads"] = max(spans["threads"], pool.threads)
    return in_threads(task, params, todo, pool, opts)
unit_runners.run_in_threads = pool_threads
sys.argv = ["zarrmill"] + sys.argv[1:]
code = cli.main()
use = resource.getrusage(resource.RUSAGE_SELF)
spans.update(wall=time.time() - LAUNCH, cpu=use.ru_utime + use.ru_stime)
print("PHASES " + json.dumps({"phases": acc, "spans": spans}))
sys.exit(code)
"""


def level_specs(image: Path) -> list[dict]:
    """Each level of a well image as the run wrote it: factors from the level above (scale
    ratios), chunk, and write block (shard, else chunk)."""
    import zarr

    attrs = json.loads((image / "zarr.json").read_text())["attributes"]
    datasets = attrs.get("ome", attrs)["multiscales"][0]["datasets"]
    scales = [d["coordinateTransformations"][0]["scale"] for d in datasets]
    arrays = [zarr.open_array(str(image / d["path"]), mode="r") for d in datasets]
    return [{"factors": [round(b / a) for a, b in zip(scales[k - 1], scales[k])] if k else None,
             "chunks": arr.chunks, "block": getattr(arr, "shards", None) or arr.chunks} for k, arr in enumerate(arrays)]


def data_offset(path: str) -> int:
    with tifffile.TiffFile(path) as tf:
        return int(tf.pages[0].dataoffsets[0])


def floors(raw: Path, image: Path, work: Path, repeat: int) -> tuple[dict[str, float], int, str]:
    """Each phase's floor in seconds on 2 threads, the bytes the encode floor makes, and the codec."""
    from zarrmill.ingest_acquisition import read_acquisition
    from zarrmill.ingest_params import Params
    from zarrmill.ingest_wells import acquisition_wells
    from zarrmill.io.storage.downsample import downsample

    out: dict[str, float] = {}
    for key, code in (("bare", "pass"), ("start-up", "import zarrmill.runtime.front.cli, zarrmill.ingest, tensorstore")):
        out[key] = best_of(lambda: subprocess.run([sys.executable, "-c", code], check=True), repeat)
    p = Params(input=str(raw), output=str(work / "unused.zarr"), layout="well")
    _, wells, _ = acquisition_wells(p, read_acquisition(p))  # zarrmill's placement of every FOV
    if any(len(w.shape) != 4 for w in wells):
        raise SystemExit("this benchmark plans (c, z, y, x) wells only (no time axis)")
    chosen = p.chosen_codec()
    specs, codec = level_specs(image), chosen.for_format(2)  # the run's codec, as numcodecs' Blosc
    # (well, channel) volumes, as the run's units: the planes of each FOV (t 0) at their canvas place
    units = [(w, c, [(f, z, path) for f in w.fovs for _, cc, z, path in f.extra["planes"].files() if cc == c])
             for w in wells for c in range(w.shape[0])]
    files = [path for _, _, planes in units for _, _, path in planes]
    bufs = {path: np.empty(wells[0].fovs[0].size[-2:], wells[0].dtype) for path in files}
    offsets = {path: data_offset(path) for path in files}
    canvases = {(w.path, c): np.empty(w.shape[1:], w.dtype) for w, c, _ in units}
    levels: dict[tuple[str, int], list[np.ndarray]] = {}

    def read(path: str) -> None:
        with open(path, "rb", buffering=0) as fh:
            os.preadv(fh.fileno(), [memoryview(bufs[path].reshape(-1).view(np.uint8))], offsets[path])

    def compose(unit: tuple) -> None:
        w, c, planes = unit
        canvas = canvases[(w.path, c)]
        if sum(np.prod(f.size) for f in w.fovs) < canvas.size:
            canvas[...] = 0  # gaps between FOVs read as zeros
        for f, z, path in planes:
            z0, y0, x0 = f.pixel
            canvas[z0 + z, y0:y0 + f.size[1], x0:x0 + f.size[2]] = bufs[path]

    def down(key: tuple[str, int]) -> None:
        levels[key] = [canvases[key]]
        for spec in specs[1:]:
            levels[key].append(downsample(levels[key][-1], tuple(spec["factors"][1:]), "mean"))

    with ThreadPoolExecutor(THREADS) as pool:
        out["read"] = best_of(lambda: list(pool.map(read, files)), repeat)
        out["compose"] = best_of(lambda: list(pool.map(compose, units)), repeat)
        out["downsample"] = best_of(lambda: list(pool.map(down, canvases)), repeat)
        bufs.clear()
        chunks, shards = [], {}  # every stored chunk (not all-zero ones: sparse), by shard
        for (well, c), lvs in levels.items():
            for k, (lv, spec) in enumerate(zip(lvs, specs)):
                ch, bl = spec["chunks"], spec["block"]
                assert ch[0] == 1, "channels are chunked one at a time"
                for z, y, x in np.ndindex(*[-(-n // m) for n, m in zip(lv.shape, ch[1:])]):
                    part = lv[z * ch[1]:(z + 1) * ch[1], y * ch[2]:(y + 1) * ch[2], x * ch[3]:(x + 1) * ch[3]]
                    if part.any():
                        full = np.zeros(ch[1:], lv.dtype)  # an edge chunk is stored whole, padded
                        full[tuple(slice(0, n) for n in part.shape)] = part
                        key = (well, k, c // bl[0], z * ch[1] // bl[1], y * ch[2] // bl[2], x * ch[3] // bl[3])
                        shards.setdefault(key, []).append(len(chunks))
                        chunks.append(full)
        encoded: list[bytes] = []
        out["encode"] = best_of(lambda: encoded.__setitem__(slice(None), pool.map(codec.encode, chunks)), repeat)
        folder = work / "floor-write"

        def write_shard(item: tuple[int, list[int]]) -> None:
            with open(folder / str(item[0]), "wb", buffering=0) as fh:
                os.writev(fh.fileno(), [encoded[i] for i in item[1]])

        def write_all() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            list(pool.map(write_shard, enumerate(shards.values())))

        out["write"] = best_of(write_all, repeat)
        shutil.rmtree(folder, ignore_errors=True)
    return out, sum(len(b) for b in encoded), f"Blosc {chosen.cname} {chosen.clevel}, {chosen.shuffle}"


def rows(ph: dict, floor: dict[str, float], codec: str) -> list[tuple]:
    """Each phase's floor beside zarrmill's time in it, and its share of the whole run's wall time."""
    phases, spans = ph["phases"], ph["spans"]
    missing = [k for k in ("read", "compose", "downsample", "encode + write", "unit") if k not in phases] + \
        [k for k in ("run", "plan", "run_units", "finish", "threads") if not spans.get(k)]
    if missing:
        raise SystemExit(f"timers that never fired in the child (a wrapped name is wrong?): {missing}")
    whole, n, units = ph["whole"], spans["threads"], spans["run_units"]
    fmt = lambda f: f if isinstance(f, str) else f"{f:.2f}"  # noqa: E731
    main = lambda name, f, s: (name, fmt(f), f"{s:.2f}", f"{s / whole:.0%}")  # noqa: E731
    unit = lambda name, f, s: (f"  {name}", fmt(f), f"{s:.2f}", f"{s / n / whole:.0%}")  # noqa: E731
    return [
        main("start-up (interpreter, imports, to the step)", floor["start-up"], spans["start run"]),
        main("step: lock, ledger, input fingerprints", "0", spans["run"] - spans["plan"] - units - spans["finish"]),
        main("plan (CellVoyager metadata, arrays)", "0", spans["plan"]),
        (f"units: {units:.2f} s on {n} threads (thread-s)", "", "", ""),
        unit("read TIFF (floor: preadv)", floor["read"], phases["read"][0]),
        unit("compose (copies; floor: one per pixel)", floor["compose"], phases["compose"][0]),
        unit("downsample (every level)", floor["downsample"], phases["downsample"][0]),
        unit(f"encode ({codec}) + write", f"{floor['encode']:.2f} + {floor['write']:.2f}", phases["encode + write"][0]),
        unit("Python in units (rest of run_unit)", "0", phases["unit"][0]),
        unit("idle workers, engine between units", "0", n * units - phases["unit"][1]),
        main("finish (ROI tables, metadata, windows)", "0", spans["finish"]),
        main("exit (after the step; +-0.05 s polling)", "0", whole - spans["start run"] - spans["run"]),
        main("whole run (floors: imports + phases, no overlap)", sum(v for k, v in floor.items() if k != "bare"), whole),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("--wells", 3), ("--grid", 2), ("--z", 4), ("--channels", 2), ("--repeat", 3)):
        ap.add_argument(name, type=int, default=default)
    ap.add_argument("--shape", default="2000,2000")
    ap.add_argument("--peer", action="store_true", help="also Fractal's converter (bench_peers.py), if its venv exists")
    ap.add_argument("--peers-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    compile_zarrmill()
    work = Path(tempfile.mkdtemp(prefix="bench-plate-roofline-", dir=a.workdir))
    try:
        raw = work / "raw"
        generate(raw, a, a.wells)
        write_settings(raw, a.channels)
        n_files, raw_bytes = files_and_bytes(raw)
        print(f"input: {n_files} files, {raw_bytes / 1e6:.0f} MB ({a.wells} wells x {a.grid}x{a.grid} fields x {a.z} z "
              f"x {a.channels} channels, {a.shape} uint16); {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f}: "
              "the machine may be shared)", flush=True)
        peer = a.peer and Path(a.peers_python).exists()
        runs: dict[str, list[tuple[float, float, int]]] = {"zarrmill ingest layout: well": [], "fractal-uzh-converters": []}
        phases: list[dict] = []
        for r in range(a.repeat):  # alternating; the last plate is kept for the floors (its levels, chunks)
            plate = work / f"zm{r}" / "plate.zarr"
            os.environ["ROOFLINE_LAUNCH"] = repr(time.time())
            m = run_measured([sys.executable, "-c", PROBE] + zarrmill(
                "task", "ingest", "--set", f"input={raw}", "--set", f"output={plate}", "--set", "layout=well")[3:])
            phases.append({**json.loads(m.output.split("PHASES ", 1)[1].splitlines()[0]), "whole": m.seconds})
            runs["zarrmill ingest layout: well"].append((m.seconds, m.peak_mb, files_and_bytes(plate)[1]))
            if r < a.repeat - 1:
                shutil.rmtree(plate.parent)
            if peer:
                out = work / f"fractal{r}"
                m = run_measured([a.peers_python, str(REPO / "tests" / "peers" / "fractal_cellvoyager.py"), str(raw),
                                  str(out), str(THREADS)])
                runs["fractal-uzh-converters"].append((m.seconds, m.peak_mb, files_and_bytes(out)[1]))
                shutil.rmtree(out)
        first_well = json.loads((plate / "zarr.json").read_text())["attributes"]["ome"]["plate"]["wells"][0]["path"]
        floor, floor_bytes, codec = floors(raw, plate / first_well / "well", work, a.repeat)
        best = min(phases, key=lambda ph: ph["whole"])
        print()
        print(table(rows(best, floor, codec), ("phase", "floor s (2 threads)", "zarrmill s", "share of wall")))
        whole, total = best["whole"], sum(v for k, v in floor.items() if k != "bare")
        print(f"\nsum of floors {total:.2f} s vs wall {whole:.2f} s: {whole / total:.1f}x the floor; bare interpreter "
              f"{floor['bare']:.2f} s; CPU {best['spans']['cpu']:.2f} s of {THREADS * whole:.2f} core-s; encode floor "
              f"makes {floor_bytes / 1e6:.1f} MB, zarrmill wrote {runs['zarrmill ingest layout: well'][-1][2] / 1e6:.1f} MB\n")
        summary = [(name, f"{min(rs)[0]:.2f}", f"{min(rs)[1]:.0f}", f"{min(rs)[2] / 1e6:.1f}") for name, rs in runs.items() if rs]
        if peer:
            summary = [row + (f"{float(summary[1][1]) / float(row[1]):.2f}x",) for row in summary]
        print(table(summary, ("whole run", "best s", "its peak MB", "MB written", "vs Fractal")[:len(summary[0])]))
        if a.peer and not peer:
            print(f"Fractal left out: no {a.peers_python} (see bench_peers.py)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
