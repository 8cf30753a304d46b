"""Random patch reads from compressed stores vs uncompressed .npy, like nnU-Net's data loaders.

  python tests/bench/bench_compress.py [--seconds 3] [--workdir DIR] [--scale 1.0]

Data (generated, ~1.1 GB): 3 microscopy-like uint16 volumes (cells as blobs on background with
shot noise) and 2 smooth CT-like float32 volumes. Methods: (a) .npy via np.load(mmap_mode="r"),
(b) blosc2 defaults (its chunk/block shapes, zstd-5 + shuffle), (c) nnU-Net v2.8's layout rule with
LZ4HC-5 + shuffle, (d) zarrmill compress defaults (patch-driven layout, codec by trial). For each
patch shape (128^3 and 20x50x50), 1 and 2 reader processes with one thread each: patches/s and the
ratio to npy, warm page cache and cold (page cache dropped before each pass: root only). Plus
compression ratio and write time.

  python tests/bench/bench_compress.py --nnunet [--seconds 3] [--scale 1.0]

nnU-Net's own preprocessed folders (written by nnunetv2's save_case with its comp_blosc2_params
layout, CT-like and microscopy-like float32 data with int8 segmentations) against zarrmill
compress's rewrite of them, read as nnU-Net's trainer reads: load_case, then data and seg boxes of
the plans' patch size. Bytes on disk and patches/s side by side.
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


# -- nnU-Net's own folders vs zarrmill's rewrite of them, read the way nnU-Net's trainer reads ----------
NNUNET_PATCH = [128, 128, 128]


def nnunet_data(kind: str, shape, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(data float32 (1, z, y, x) as nnU-Net's normalisation leaves it, seg int8)."""
    if kind == "CT-like":
        vol = ct(shape, seed)
        data = (vol - vol.mean()) / vol.std()  # nnU-Net's CTNormalization ends in a z-score
        seg = ((vol > 800) + (vol > 40)).astype(np.int8)
    else:  # microscopy-like: quantised intensities (no resampling), z-scored as nnU-Net does
        vol = microscopy(shape, seed).astype(np.float32)
        data = (vol - vol.mean()) / vol.std()
        seg = (vol > np.percentile(vol, 90)).astype(np.int8)
    return data.astype(np.float32), seg


def write_nnunet_folder(folder: Path, kind: str, shapes, patch) -> None:
    from nnunetv2.training.dataloading.nnunet_dataset import comp_blosc2_params, nnUNetDatasetBlosc2

    folder.mkdir(parents=True)
    (folder.parent / "nnUNetPlans.json").write_text(
        '{"plans_name": "nnUNetPlans", "configurations": {"3d_fullres": {"data_identifier": "%s", '
        '"patch_size": %s}}}' % (folder.name, list(patch)))
    for i, shape in enumerate(shapes):
        data, seg = nnunet_data(kind, shape, i)
        blocks, chunks = comp_blosc2_params(data.shape, patch, data.itemsize)  # as nnU-Net's preprocessing
        nnUNetDatasetBlosc2.save_case(data, seg, {"case": i}, str(folder / f"case_{i:03d}"), chunks=chunks,
                                      blocks=blocks)


def _nnunet_reader(folder: str, patch, seconds: float, seed: int, start: float) -> int:
    """nnU-Net's training path per sample: ``load_case`` (blosc2.open, mmap, one thread), then a
    random box of the patch size from data and segmentation."""
    import time

    from nnunetv2.training.dataloading.nnunet_dataset import nnUNetDatasetBlosc2

    ds = nnUNetDatasetBlosc2(folder, nnUNetDatasetBlosc2.get_identifiers(folder))
    rng = np.random.default_rng(seed)
    while time.time() < start:
        time.sleep(0.001)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        data, seg, _, _ = ds.load_case(ds.identifiers[int(rng.integers(len(ds.identifiers)))])
        size = [min(p, s) for p, s in zip(patch, data.shape[1:])]
        o = [int(rng.integers(0, s - p + 1)) for s, p in zip(data.shape[1:], size)]
        box = (slice(None),) + tuple(slice(a, a + p) for a, p in zip(o, size))
        np.asarray(data[box]), np.asarray(seg[box])
        n += 1
    return n


def nnunet_rate(folder: Path, patch, seconds: float, processes: int) -> float:
    import multiprocessing as mp
    import time

    with mp.get_context("spawn").Pool(processes) as pool:
        counts = pool.starmap(_nnunet_reader, [(str(folder), list(patch), seconds, 11 + i, time.time() + 1.0)
                                               for i in range(processes)])
    return sum(counts) / seconds


def nnunet_comparison(work: Path, seconds: float, scale: float) -> None:
    s = lambda *shape: tuple(max(128, int(n * scale)) for n in shape)  # noqa: E731
    rows = []
    for kind in ("CT-like", "microscopy-like"):
        src = work / kind / "Dataset001" / "nnUNetPlans_3d_fullres"
        write_nnunet_folder(src, kind, [s(192, 320, 320), s(224, 288, 288), s(160, 352, 352)], NNUNET_PATCH)
        dst = work / kind / "zarrmill" / src.name
        m = run_measured(zarrmill("task", "compress", "--executor", "local", "--set", f"input={src}",
                                  "--set", f"output={dst}"))
        assert dst.is_dir(), m.output
        results = {}
        for method, folder in (("nnU-Net's own files", src), ("zarrmill rewrite", dst)):
            nbytes = sum(f.stat().st_size for f in folder.glob("*.b2nd"))
            rates = [nnunet_rate(folder, NNUNET_PATCH, seconds, procs) for procs in (1, 2)]
            results[method] = (nbytes, rates)
        base_bytes, base_rates = results["nnU-Net's own files"]
        for method, (nbytes, rates) in results.items():
            rows.append((kind, "x".join(map(str, NNUNET_PATCH)), method, f"{nbytes / 1e6:.1f}",
                         f"{nbytes / base_bytes:.3f}", *[f"{r:.1f} ({r / b:.2f}x)" for r, b in zip(rates, base_rates)]))
    print(table(rows, ("data", "patch", "folder", "MB on disk (data+seg)", "bytes vs nnU-Net",
                       "patches/s 1 reader", "patches/s 2 readers")))
    print("(x): relative to nnU-Net's own files; each patch = load_case + data and seg boxes, as nnU-Net's loader")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--nnunet", action="store_true", help="only nnU-Net's own folders vs zarrmill's rewrite")
    ap.add_argument("--patches", default=";".join(",".join(map(str, p)) for p in PATCHES),
                    help="patch shapes, z,y,x separated by ';' (default: 128,128,128;20,50,50)")
    ap.add_argument("--data", default="all", choices=["all", "microscopy", "ct"], help="which data sets")
    args = ap.parse_args()
    patches = [tuple(int(n) for n in p.split(",")) for p in args.patches.split(";")]
    work = Path(tempfile.mkdtemp(prefix="zm-bench-compress-", dir=args.workdir))  # its own folder: a given --workdir is kept
    if args.nnunet:
        nnunet_comparison(work, args.seconds, args.scale)
        shutil.rmtree(work, ignore_errors=True)
        return
    data = make_data(work, args.scale)
    total = sum(f.stat().st_size for d in data.values() for f in d.glob("*.npy"))
    print(f"data: {total / 1e9:.2f} GB in {sum(len(list(d.glob('*.npy'))) for d in data.values())} cases")
    rows = []
    for dname, folder in data.items():
        if args.data != "all" and not dname.lower().startswith(args.data):
            continue
        for patch in patches:
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
