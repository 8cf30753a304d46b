"""Which Blosc codec should `ingest` use by default? Measured on real microscopy images.

  python tests/bench/bench_codec.py [--images PATH ...] [--no-samples] [--workdir DIR]

Real pixels, from where a machine that sees package registries only can reach them: images that
scientific packages ship inside their PyPI wheels (fetched with ``pip download --no-deps`` into the
work folder, nothing installed):

- stardist 0.9.2, ``data/images/img2d.tif``: fluorescent nuclei, 512 x 512 uint16 (values 0-235);
- stardist 0.9.2, ``data/images/img3d.tif``: a fluorescent nuclei volume, 31 x 61 x 57 uint16;
- mahotas 1.4.19, ``demos/data/nuclear.png``: fluorescent nuclei, 1024 x 1344 (its first channel, uint8);
- scikit-image (already installed), ``data/cell.png``: phase contrast, 660 x 550 uint8.

``--images`` adds TIFF files or folders of TIFFs: run it on your own instrument's planes, as the
choice that counts is the one on your pixels. For comparison the script also times one plane of
the synthetic CellVoyager plate ``generate-plate`` writes (the pixels of ``bench_peers.py``).

Each codec compresses every plane through numcodecs' Blosc (what zarr's ``BloscCodec`` runs, one
thread, as each dask worker thread does), best of 3 passes; the table gives the size ratio and
the compress and decompress speeds per image set, and the bytes of all sets together."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import tifffile
from measure import table

WHEELS = {  # package==version: members to take out of its wheel
    "stardist==0.9.2": ["stardist/data/images/img2d.tif", "stardist/data/images/img3d.tif"],
    "mahotas==1.4.19": ["mahotas/demos/data/nuclear.png"],
}
CODECS = [  # (cname, clevel, shuffle, Blosc block bytes or 0: Blosc's own); the first is the volume default
    ("lz4", 5, "bitshuffle", 0),
    ("lz4", 5, "shuffle", 0),
    ("lz4hc", 3, "bitshuffle", 0),
    ("zstd", 1, "shuffle", 0),
    ("zstd", 1, "shuffle", 1 << 20),  # the plate default (ingest_params.PLATE_CODEC)
    ("zstd", 1, "bitshuffle", 0),
    ("zstd", 1, "bitshuffle", 1 << 20),
    ("zstd", 3, "shuffle", 0),
    ("zstd", 3, "shuffle", 1 << 20),
    ("zstd", 3, "bitshuffle", 0),
    ("zstd", 5, "bitshuffle", 0),
]


def fetch_wheel_images(work: Path) -> dict[str, list[np.ndarray]]:
    from PIL import Image

    out: dict[str, list[np.ndarray]] = {}
    for spec, members in WHEELS.items():
        dest = work / spec.split("==")[0]
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), spec], check=True)
        wheel = next(dest.glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            for member in members:
                path = Path(zf.extract(member, dest))
                img = tifffile.imread(path) if path.suffix == ".tif" else np.asarray(Image.open(path))
                if img.ndim == 3 and img.shape[-1] in (3, 4):  # an RGB(A) PNG: its first channel
                    img = np.ascontiguousarray(img[..., 0])
                out[f"{spec.split('==')[0]} {path.name}"] = planes(img)
    return out


def skimage_cell() -> dict[str, list[np.ndarray]]:
    from PIL import Image
    import skimage

    path = Path(skimage.__file__).parent / "data" / "cell.png"
    return {"scikit-image cell.png": planes(np.asarray(Image.open(path)))}


def synthetic_plane(work: Path) -> dict[str, list[np.ndarray]]:
    raw = work / "synthetic"
    subprocess.run([sys.executable, "-m", "zarrmill", "task", "generate-plate", "--set", f"output={raw}",
                    "--set", "wells=[B03]", "--set", "grid=[1,1]", "--set", "shape=[2000,2000]",
                    "--set", "z_planes=1", "--set", "channels=1"],
                   check=True, stdout=subprocess.DEVNULL)
    tif = sorted(raw.rglob("*.tif"))[0]
    return {"synthetic CellVoyager plane (generate-plate)": planes(tifffile.imread(tif))}


def user_images(paths: list[Path]) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[np.ndarray]] = {}
    for p in paths:
        files = sorted(p.rglob("*.tif*")) if p.is_dir() else [p]
        out[str(p)] = [pl for f in files for pl in planes(tifffile.imread(f))]
    return out


def planes(img: np.ndarray) -> list[np.ndarray]:
    """Ingest writes chunks of one plane: split a stack into its planes."""
    img = np.asarray(img)
    return [np.ascontiguousarray(p) for p in img.reshape(-1, *img.shape[-2:])]


def measure(codec, images: list[np.ndarray]) -> tuple[int, int, float, float]:
    raw = sum(p.nbytes for p in images)
    best_c = best_d = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        encoded = [codec.encode(p) for p in images]
        best_c = min(best_c, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for e, p in zip(encoded, images):
            if not np.array_equal(np.frombuffer(codec.decode(e), p.dtype).reshape(p.shape), p):
                raise AssertionError("codec is not lossless")
        best_d = min(best_d, time.perf_counter() - t0)
    return raw, sum(len(e) for e in encoded), raw / best_c / 1e6, raw / best_d / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, nargs="*", default=[])
    ap.add_argument("--no-samples", action="store_true", help="only --images")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    from numcodecs import Blosc, blosc

    blosc.set_nthreads(1)
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        work = Path(tmp)
        sets: dict[str, list[np.ndarray]] = {}
        if not a.no_samples:
            sets |= fetch_wheel_images(work) | skimage_cell()
        sets |= user_images(a.images)
        real = list(sets)
        if not a.no_samples:
            sets |= synthetic_plane(work)
        mode = {"shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
        rows, totals = [], {}
        for name, imgs in sets.items():
            shape = "x".join(map(str, imgs[0].shape))
            for cname, clevel, shuffle, blocksize in CODECS:
                raw, packed, c_mbs, d_mbs = measure(Blosc(cname, clevel, mode[shuffle], blocksize=blocksize), imgs)
                label = f"{cname}-{clevel} {shuffle}" + (f" {blocksize >> 10} KiB blocks" if blocksize else "")
                rows.append((f"{name} ({len(imgs)} x {shape} {imgs[0].dtype})", label, f"{raw / packed:.2f}",
                             f"{c_mbs:.0f}", f"{d_mbs:.0f}"))
                if name in real:
                    r, p, c, d = totals.get(label, (0, 0, 0.0, 0.0))
                    totals[label] = (r + raw, p + packed, c + raw / c_mbs, d + raw / d_mbs)
        print(table(rows, ("images", "codec", "ratio", "compress MB/s", "decompress MB/s")))
        print("\nall real images together:")
        base = totals[f"{CODECS[0][0]}-{CODECS[0][1]} {CODECS[0][2]}"]  # bytes relative to LZ4 5 + bitshuffle
        print(table([(label, f"{r / p:.2f}", f"{p / base[1]:.2f}x", f"{r / c:.0f}", f"{r / d:.0f}")
                     for label, (r, p, c, d) in totals.items()],
                    ("codec", "ratio", "bytes vs LZ4 5 bitshuffle", "compress MB/s", "decompress MB/s")))


if __name__ == "__main__":
    main()
