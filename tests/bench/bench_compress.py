"""Random patch reads from compressed stores vs uncompressed .npy, like nnU-Net's data loaders.

  python tests/bench/bench_compress.py [--seconds 3] [--workdir DIR] [--scale 1.0]

Data (generated, ~1.1 GB): 3 microscopy-like uint16 volumes (cells as blobs on background with
shot noise) and 2 smooth CT-like float32 volumes. Methods: (a) .npy via np.load(mmap_mode="r"),
(b) blosc2 defaults (its chunk/block shapes, zstd-5 + shuffle), (c) nnU-Net v2.8's layout rule with
LZ4HC-5 + shuffle, (d) zarrmill compress defaults (patch-driven layout, codec by trial). For each
patch shape (128^3 and 20x50x50), 1 and 2 reader processes with one thread each: patches/s and the
ratio to npy, warm page cache and cold (page cache dropped before each pass: root only). Plus
compression ratio and write time.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from measure import run_measured, table, zarrmill

from zarrmill.io.training.patch_bench import patch_throughput
from zarrmill.io.synthetic.blobs import Blobs, render, to_dtype

METHODS = {
    "blosc2 defaults": ["layout=blosc2", "codec=zstd", "clevel=5", "filter=shuffle"],
    "nnU-Net v2.8 rule": ["layout=nnunet", "codec=lz4hc", "clevel=5", "filter=shuffle"],
    "zarrmill": [],
}
PATCHES = [(128, 128, 128), (20, 50, 50)]


def microscopy(shape, seed) -> np.ndarray:
    blobs = Blobs.make(shape, int(np.prod(shape) / 12000), 5.0, seed)
    return to_dtype(render(blobs, tuple((0, s) for s in shape), False, seed + 1), np.uint16)[None]


def ct(shape, seed) -> np.ndarray:
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, s, dtype=np.float32) for s in shape], indexing="ij")
    body = (z ** 2 / 0.9 + y ** 2 / 0.7 + x ** 2 / 0.8) < 1
    bone = ((y + 0.3) ** 2 + x ** 2) < 0.02
    smooth = 30 * np.cos(3 * x + seed) * np.cos(2 * y) + 20 * np.sin(4 * z)
    vol = np.where(body, 40 + smooth, -1000).astype(np.float32) + np.where(bone, 900, 0).astype(np.float32)
    vol += np.random.default_rng(seed).normal(0, 4, size=shape).astype(np.float32)
    return vol[None]


def make_data(work: Path, scale: float) -> dict[str, Path]:
    s = lambda *shape: tuple(max(160, int(n * scale)) for n in shape)  # noqa: E731
    sets = {"microscopy uint16": (work / "micro", microscopy, [s(320, 512, 512)] * 3),
            "CT float32": (work / "ct", ct, [s(256, 512, 512)] * 2)}
    out = {}
    for name, (folder, make, shapes) in sets.items():
        folder.mkdir(parents=True, exist_ok=True)
        for i, shape in enumerate(shapes):
            np.save(folder / f"case{i}.npy", make(shape, i))
        out[name] = folder
    return out


def write(folder: Path, dst: Path, patch, extra: list[str]) -> tuple[float, float]:
    sets = [f"input={folder}", f"output={dst}", f"patch={list(patch)}", *extra]
    args = ["task", "compress", "--executor", "local"]
    for item in sets:
        args += ["--set", item]
    m = run_measured(zarrmill(*args))
    raw = sum(f.stat().st_size for f in folder.glob("*.npy"))
    comp = sum(f.stat().st_size for f in dst.glob("*.b2nd"))
    return m.seconds, raw / comp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="zm-bench-compress-"))
    data = make_data(work, args.scale)
    total = sum(f.stat().st_size for d in data.values() for f in d.glob("*.npy"))
    print(f"data: {total / 1e9:.2f} GB in {sum(len(list(d.glob('*.npy'))) for d in data.values())} cases")
    rows = []
    for dname, folder in data.items():
        for patch in PATCHES:
            files = {"npy memmap": (sorted(str(f) for f in folder.glob("*.npy")), float("nan"), 1.0)}
            for method, extra in METHODS.items():
                dst = work / f"out-{method.split()[0]}"
                shutil.rmtree(dst, ignore_errors=True)
                secs, ratio = write(folder, dst, patch, extra)
                files[method] = (sorted(str(f) for f in dst.glob("*.b2nd")), secs, ratio)
            base = {}
            for method, (paths, secs, ratio) in files.items():
                res = {}
                for cold in (False, True):
                    for procs in (1, 2):
                        rate, _ = patch_throughput(paths, patch, args.seconds, procs, seed=7, cold=cold)
                        res[(cold, procs)] = rate
                if method == "npy memmap":
                    base = res
                cells = [f"{res[k]:.0f} ({res[k] / base[k]:.2f}x)" if base[k] == base[k] else "n/a"
                         for k in ((False, 1), (False, 2), (True, 1), (True, 2))]
                rows.append((dname, "x".join(map(str, patch)), method, f"{ratio:.2f}",
                             "-" if secs != secs else f"{secs:.1f}", *cells))
                if method != "npy memmap":
                    shutil.rmtree(Path(paths[0]).parent, ignore_errors=True)
    print(table(rows, ("data", "patch", "method", "ratio", "write s", "warm 1p /s", "warm 2p /s",
                       "cold 1p /s", "cold 2p /s")))
    print("(x): patches/s relative to npy memmap in the same column")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
