"""Random 64^3 patches from compressed training data against their roofline (issue 53, item 3).

  python tests/bench/bench_patch_roofline.py [--seconds 2] [--rounds 2] [--scale 1.0] [--workdir DIR] [--big]

Data (generated): 3 microscopy-like uint16 volumes of 320x512x512 (503 MB, bench_compress's
``microscopy``), as .npy. Configurations written by ``zarrmill task compress --set patch=[64,64,64]``:
its defaults, and ``min_ratio=2``. For 1 and 2 reader processes (one thread each, as training
loaders run them), page cache warm (every file read once before each measurement):

- memmap: ``np.load(mmap_mode="r")`` and a copy of each patch (the copy is the read);
- reader: ``open_patches`` (zarrmill's training reader), one patch per call as a new array (as
  nnU-Net's loader reads), and 8 patches of a case per call into a reused batch array
  (``read_batch``; the memmap then copies into the same kind of array);
- floor: patch bytes x over-read / decode throughput, where over-read is the bytes a random patch
  decodes (whole blocks) per patch byte, averaged over 10000 random offsets, and decode throughput
  is measured on the same files by as many processes as readers, each decompressing whole chunks on
  one thread (blosc2's own C decoder, no slicing). A block-compressed reader cannot beat it: it must
  decode every block a patch touches, at best at that speed. Decode and the reader alternate every
  0.2 s in the same processes, so load from elsewhere on a shared machine slows both alike.

Rounds repeat every measurement (medians are printed). Then: where one
reader's time goes (decode at the measured throughput, blosc2's C slicer beyond decoding, Python),
and the bound at ratio >= 2 over every candidate of the codec trial (codec x filter x block shape):
the best floor, and the floor with no over-read at all. ``--big``: 5 rounds of 5 s.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_compress import microscopy
from measure import run_measured, table, zarrmill

from zarrmill.io.training.b2store import open_patches
from zarrmill.io.training.patch_bench import patch_run, read_patches, warm_page_cache
from zarrmill.io.training.store_check import compress_summary

PATCH = (64, 64, 64)
CONFIGS = {"compress defaults": [], "compress min_ratio=2": ["min_ratio=2"]}
BATCH = 8  # patches per call in batched mode (read_batch; a memmap copies into the same batch array)


def make_data(work: Path, scale: float) -> list[Path]:
    shape = tuple(max(128, int(n * scale)) for n in (320, 512, 512))
    folder = work / "micro"
    folder.mkdir(parents=True)
    for i in range(3):
        np.save(folder / f"case{i}.npy", microscopy(shape, i))
    return sorted(folder.glob("*.npy"))


def write(src: Path, dst: Path, extra: list[str]) -> dict:
    args = ["task", "compress", "--executor", "local", "--set", f"input={src}", "--set", f"output={dst}",
            "--set", f"patch={list(PATCH)}"]
    for item in extra:
        args += ["--set", item]
    m = run_measured(zarrmill(*args))
    paths = sorted(dst.glob("*.b2nd"))
    raw = sum(f.stat().st_size for f in src.glob("*.npy"))
    comp = sum(f.stat().st_size for f in paths)
    a = open_patches(paths[0])
    return {"paths": paths, "seconds": m.seconds, "write_rss": m.peak_mb, "ratio": raw / comp, "mb": comp / 1e6,
            "meta": a.meta, "blocks": a.blocks, "chunks": a.chunks, "over": over_read(a.shape, a.blocks)}


def over_read(shape, blocks, n: int = 10000) -> float:
    """Mean bytes decoded per patch byte over random offsets (whole blocks touched)."""
    rng = np.random.default_rng(5)
    spatial, b = shape[-3:], blocks[-3:]
    total = 0
    for _ in range(n):
        o = [int(rng.integers(0, s - p + 1)) for s, p in zip(spatial, PATCH)]
        total += math.prod(((x + p - 1) // k - x // k + 1) * k for x, p, k in zip(o, PATCH, b))
    return total / n / math.prod(PATCH)


def _mixed(paths: list[str], seconds: float, seed: int, start: float, batch: int) -> tuple[float, float, int, float]:
    """Alternating 0.2 s windows in one process: blosc2 decompressing whole random chunks (one
    thread), then patches read through ``open_patches`` (``batch`` per call). Both see the same
    machine: other load slows both alike. (decoded bytes, decode s, patches, read s)."""
    import blosc2

    blosc2.set_nthreads(1)
    raws = [blosc2.open(p, mode="r", mmap_mode="r") for p in paths]
    arrays = [open_patches(p) for p in paths]
    buf = np.empty(raws[0].schunk.chunksize, np.uint8)
    rng = np.random.default_rng(seed)
    while time.time() < start:
        time.sleep(0.001)
    dec = dec_s = read_s = 0.0
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = t = time.perf_counter()
        while t - t0 < 0.2:
            a = raws[int(rng.integers(len(raws)))]
            a.schunk.decompress_chunk(int(rng.integers(a.schunk.nchunks)), buf)
            dec, t = dec + buf.nbytes, time.perf_counter()
        dec_s += t - t0
        t0 = t
        while t - t0 < 0.2:
            read_patches(arrays[int(rng.integers(len(arrays)))], PATCH, rng, batch)
            n, t = n + batch, time.perf_counter()
        read_s += t - t0
    return dec, dec_s, n, read_s


def mixed(paths: list[Path], seconds: float, processes: int, batch: int) -> tuple[float, float]:
    """(decode GB/s, reader patches/s), each summed over ``processes`` one-thread processes."""
    args = [([str(p) for p in paths], seconds, 3 + i, time.time() + 0.5, batch) for i in range(processes)]
    with mp.get_context("spawn").Pool(processes) as pool:
        res = pool.starmap(_mixed, args)
    return sum(r[0] / r[1] for r in res) / 1e9, sum(r[2] / r[3] for r in res)


def time_split(paths: list[Path], seconds: float, over: float) -> tuple[float, float, float, float]:
    """One reader in this process: (ms per patch, decode %, C slicer beyond decode %, Python %). The
    same boxes read through ``open_patches`` and straight through the C slicer it calls; decode
    speed measured between them (whole chunks), so other load on the machine skews all three alike."""
    import blosc2

    arrays = [open_patches(p) for p in paths]
    raws = [blosc2.open(str(p), mode="r", mmap_mode="r") for p in paths]
    buf = np.empty(raws[0].schunk.chunksize, np.uint8)
    rng = np.random.default_rng(9)
    boxes = []
    for _ in range(400):
        i = int(rng.integers(len(arrays)))
        boxes.append((i, [int(rng.integers(0, s - p + 1)) for s, p in zip(arrays[i].shape[-3:], PATCH)]))
    lead = len(arrays[0].shape) - 3
    out = np.empty((1,) * lead + PATCH, arrays[0].dtype)
    full = slow = dec_s = 0.0
    n = dec = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i, o in boxes[:20]:
            a = arrays[i]
            t0 = time.perf_counter()
            a[(0,) * lead + tuple(slice(x, x + p) for x, p in zip(o, PATCH))]
            t1 = time.perf_counter()
            a._slice_into(a._a, out, ((0,) * lead + tuple(o), (1,) * lead + tuple(x + p for x, p in zip(o, PATCH))))
            t2 = time.perf_counter()
            r = raws[i]
            r.schunk.decompress_chunk(int(rng.integers(r.schunk.nchunks)), buf)
            full, slow, dec_s, n, dec = full + t1 - t0, slow + t2 - t1, dec_s + time.perf_counter() - t2, n + 1, dec + buf.nbytes
        boxes = boxes[20:] + boxes[:20]
    per, c_call = full / n, slow / n
    decode = math.prod(PATCH) * arrays[0].dtype.itemsize * over / (dec / dec_s)
    return per * 1e3, 100 * decode / per, 100 * (c_call - decode) / per, 100 * (per - c_call) / per


def bound_rows(trial: list[dict], memmap: float) -> list[tuple]:
    """Candidates of the codec trial at ratio >= 2 by floor (one thread), best first."""
    nbytes = math.prod(PATCH) * 2
    ok = sorted((t for t in trial if t["ratio"] >= 2), key=lambda t: -t["decompress_gbs"] / t["over_read"])
    rows = []
    for t in ok[:6]:
        floor = t["decompress_gbs"] * 1e9 / (nbytes * t["over_read"])
        rows.append((f"{t['codec']}-{t['clevel']} {t['filter']}", "x".join(map(str, t["blocks"][-3:])),
                     f"{t['ratio']:.3f}", f"{t['decompress_gbs']:.2f}", f"{t['over_read']:.2f}", f"{floor:.0f}",
                     f"{floor / memmap:.2f}x"))
    if ok:
        top = max(ok, key=lambda t: t["decompress_gbs"])
        rows.append((f"no over-read: {top['codec']}-{top['clevel']} {top['filter']}", "-", f"{top['ratio']:.3f}",
                     f"{top['decompress_gbs']:.2f}", "1.00", f"{top['decompress_gbs'] * 1e9 / nbytes:.0f}",
                     f"{top['decompress_gbs'] * 1e9 / nbytes / memmap:.2f}x"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--big", action="store_true", help="5 rounds of 5 s")
    args = ap.parse_args()
    if args.big:
        args.seconds, args.rounds = max(args.seconds, 5.0), max(args.rounds, 5)
    work = Path(tempfile.mkdtemp(prefix="zm-bench-roofline-", dir=args.workdir))
    try:
        run(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    npys = make_data(work, args.scale)
    print(f"data: {sum(f.stat().st_size for f in npys) / 1e6:.0f} MB in {len(npys)} uint16 volumes "
          f"{np.load(npys[0], mmap_mode='r').shape}, patch {PATCH}", flush=True)
    confs = {name: write(npys[0].parent, work / f"out{i}", extra) for i, (name, extra) in enumerate(CONFIGS.items())}
    res: dict[tuple, list[float]] = {}
    rss: dict[str, float] = {}
    for _ in range(args.rounds):
        for procs, batch in ((1, 1), (2, 1), (1, BATCH), (2, BATCH)):
            for name, paths in [("memmap", npys)] + [(k, c["paths"]) for k, c in confs.items()]:
                warm_page_cache(paths)
                r = patch_run(paths, PATCH, args.seconds, procs, seed=7, batch=batch)
                res.setdefault((name, procs, batch), []).append(r.rate)
                rss[name] = max(rss.get(name, 0), r.peak_rss_mb)
                if name != "memmap" and batch == 1:  # the floor does not depend on batching
                    gbs, rate = mixed(paths, args.seconds, procs, batch)
                    res.setdefault((name, procs, batch, "gbs"), []).append(gbs)
                    res.setdefault((name, procs, batch, "mixed"), []).append(rate)
    med = {k: statistics.median(v) for k, v in res.items()}
    nbytes = math.prod(PATCH) * 2
    rows = []
    for batch in (1, BATCH):
        mm = {p: med["memmap", p, batch] for p in (1, 2)}
        rows.append((f"memmap (.npy), {batch} per call", "1.00", f"{sum(f.stat().st_size for f in npys) / 1e6:.0f}",
                     "-", "-", "-", "-", "-", f"{mm[1]:.0f} / {mm[2]:.0f}", "-", "1.00x / 1.00x", f"{rss['memmap']:.0f}"))
        for name, c in confs.items():
            m, k = c["meta"], (name, batch)
            floor = {p: med[name, p, 1, "gbs"] * 1e9 / (nbytes * c["over"]) for p in (1, 2)}
            same = (f"{med[name, 1, 1, 'mixed'] / floor[1]:.2f} / {med[name, 2, 1, 'mixed'] / floor[2]:.2f}"
                    if batch == 1 else "-")
            rows.append((f"{name}, {batch} per call: {m['codec']}-{m['clevel']} {m['filter']}, blocks "
                         f"{'x'.join(map(str, c['blocks'][-3:]))}", f"{c['ratio']:.2f}", f"{c['mb']:.0f}",
                         f"{c['seconds']:.1f} s / {c['write_rss']:.0f} MB", f"{c['over']:.2f}",
                         f"{med[name, 1, 1, 'gbs']:.2f} / {med[name, 2, 1, 'gbs']:.2f}",
                         f"{floor[1]:.0f} / {floor[2]:.0f}", f"{floor[1] / mm[1]:.2f}x / {floor[2] / mm[2]:.2f}x",
                         f"{med[name, 1, batch]:.0f} / {med[name, 2, batch]:.0f}", same,
                         f"{med[name, 1, batch] / mm[1]:.2f}x / {med[name, 2, batch] / mm[2]:.2f}x",
                         f"{rss[k[0]]:.0f}"))
    print(table(rows, ("configuration", "ratio", "MB on disk", "write time / peak RSS", "over-read",
                       "decode GB/s 1p / 2p", "floor patches/s 1p / 2p", "floor / memmap", "reader patches/s 1p / 2p",
                       "reader / floor (same windows)", "reader / memmap", "reader peak RSS MB")))
    print(f"(medians of {args.rounds} rounds of {args.seconds:.0f} s; 1p / 2p: 1 and 2 reader processes; floor and "
          f"'same windows': decode and reads alternating every 0.2 s in the same processes)")
    split = [(name, *[f"{v:.1f}" if i == 0 else f"{v:.0f} %" for i, v in enumerate(
        time_split(c["paths"], args.seconds, c["over"]))]) for name, c in confs.items()]
    print(table(split, ("configuration", "ms per patch", "decode", "C slicer beyond decode", "Python")))
    trial = (compress_summary(confs["compress min_ratio=2"]["paths"][0].parent) or {})["codec"]["trial"]
    print("Bound at ratio >= 2 (codec trial of min_ratio=2 on sampled chunks, one thread):")
    print(table(bound_rows(trial, med["memmap", 1, 1]), ("candidate", "blocks", "ratio", "decode GB/s", "over-read",
                                                      "floor patches/s", "floor / memmap 1p")))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
