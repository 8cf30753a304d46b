"""Writing whole shards of microscopy planes: zarrmill's write path (write_region, through
tensorstore) vs zarr-python's own pipeline and zarr-python with the zarrs codec pipeline, on the
same arrays; and reading single inner chunks at random (the training patch path): zarrmill's
read_chunk vs zarr-python with either pipeline.

  python tests/bench/bench_chunk_path.py [--planes 48] [--shape 2000,2000] [--repeat 3] [--reads 300]

Each writer gets a fresh zarr v3 array (planes x y x x uint16, shard = one plane, chunks = a
quarter plane, Blosc LZ4 + bitshuffle: what ingest writes) and writes every plane with a pool of
one thread per core. Files are compared byte for byte with zarr-python's, else pixel for pixel.
Optional: ``pip install zarrs`` (left out of the tables when missing)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr
from measure import table

from zarrmill.io.storage.arrays import open_for_write, write_region
from zarrmill.io.storage.chunk_read import read_chunk


def make(path: Path, n: int, shape: tuple[int, int]) -> zarr.Array:
    return zarr.create_array(str(path), shape=(n,) + shape, dtype="uint16", chunks=(1, shape[0] // 2, shape[1] // 2),
                             shards=(1,) + shape, config={"write_empty_chunks": True},
                             compressors=zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"))


def planes(n: int, shape: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    base = (1000 + 800 * np.sin(yy / 37.0) * np.cos(xx / 53.0)).astype(np.uint16)
    return [base + rng.integers(0, 200, shape, dtype=np.uint16) for _ in range(n)]


def in_pool(fn, data: list[np.ndarray]) -> None:
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(fn, range(len(data))))


def zarrmill_writer(path: Path, data: list[np.ndarray]) -> None:
    arr = open_for_write(path)
    in_pool(lambda i: write_region(arr, (i, 0, 0), data[i][None]), data)


def zarr_python(path: Path, data: list[np.ndarray]) -> None:
    arr = zarr.open_array(str(path), mode="r+")

    def one(i: int) -> None:
        arr[i] = data[i]
    in_pool(one, data)


ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"


def zarrs_writer(path: Path, data: list[np.ndarray]) -> None:
    import zarrs  # noqa: F401 - the pipeline zarr loads by name

    with zarr.config.set({"codec_pipeline.path": ZARRS_PIPELINE}):
        zarr_python(path, data)


WRITERS = {"zarrmill write_region (tensorstore)": zarrmill_writer,
           "zarr-python 3 default pipeline": zarr_python, "zarr-python + zarrs pipeline": zarrs_writer}


def reads(work: Path, n: int) -> list[tuple[str, str, str]]:
    """ms per random 16x64x64 inner chunk of a 64x512x512 shard (the patch-training read)."""
    path = work / "reads"
    arr = zarr.create_array(str(path), shape=(64, 512, 512), chunks=(16, 64, 64), shards=(64, 512, 512),
                            dtype="uint16", compressors=zarr.codecs.BloscCodec(cname="lz4", clevel=5,
                                                                                shuffle="bitshuffle"))
    arr[...] = np.random.default_rng(0).integers(0, 1000, arr.shape, dtype="uint16")
    rng = np.random.default_rng(1)
    picks = [tuple(int(rng.integers(0, g)) for g in (4, 8, 8)) for _ in range(n)]
    plain = zarr.open_array(str(path), mode="r")
    try:
        import zarrs  # noqa: F401
        with zarr.config.set({"codec_pipeline.path": ZARRS_PIPELINE}):
            via_zarrs = zarr.open_array(str(path), mode="r")
    except ImportError:
        via_zarrs = None

    def cut(a: zarr.Array):
        return lambda c: a[c[0] * 16:(c[0] + 1) * 16, c[1] * 64:(c[1] + 1) * 64, c[2] * 64:(c[2] + 1) * 64]
    readers = {"zarrmill read_chunk": lambda c: read_chunk(plain, c),
               "zarr-python 3 default pipeline": cut(plain)}
    if via_zarrs is not None:
        readers["zarr-python + zarrs"] = cut(via_zarrs)
    timed = {}
    for name, read in readers.items():
        t0 = time.perf_counter()
        for c in picks:
            read(c)
        timed[name] = (time.perf_counter() - t0) / n * 1e3
    base = timed["zarr-python 3 default pipeline"]
    return [(name, f"{ms:.3f}", f"{base / ms:.1f}x") for name, ms in timed.items()]


def files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
            and f.name != "zarr.json"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planes", type=int, default=48)
    ap.add_argument("--shape", default="2000,2000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reads", type=int, default=300, help="random inner-chunk reads (0: none)")
    a = ap.parse_args()
    shape = tuple(int(v) for v in a.shape.split(","))
    data = planes(a.planes, shape)
    mb = sum(d.nbytes for d in data) / 1e6
    work = Path(tempfile.mkdtemp(prefix="bench-chunk-path-"))
    best: dict[str, float] = {}
    same: dict[str, str] = {}
    try:
        reference = None
        for r in range(a.repeat):
            for name, writer in WRITERS.items():
                path = work / f"{r}-{len(best)}-{name.split()[0]}"
                make(path, a.planes, shape)
                t0 = time.perf_counter()
                try:
                    writer(path, data)
                except ImportError as err:
                    same[name] = f"not installed ({err.name})"
                    shutil.rmtree(path)
                    continue
                seconds = time.perf_counter() - t0
                best[name] = min(seconds, best.get(name, seconds))
                if name.startswith("zarr-python 3") and reference is None:
                    reference = files(path)
                if reference is not None and name not in same:
                    same[name] = "identical" if files(path) == reference else "differ (same pixels?)"
                    if same[name] != "identical":
                        back = zarr.open_array(str(path), mode="r")[:]
                        same[name] = "same pixels, other bytes" if all(
                            np.array_equal(back[i], d) for i, d in enumerate(data)) else "WRONG PIXELS"
                shutil.rmtree(path)
        zp = best["zarr-python 3 default pipeline"]
        rows = [(name, f"{s:.2f}", f"{mb / s:.0f}", f"{zp / s:.2f}x", same.get(name, ""))
                for name, s in best.items()]
        rows += [(name, "", "", "", why) for name, why in same.items() if name not in best]
        print(f"{a.planes} planes of {shape[0]}x{shape[1]} uint16 ({mb:.0f} MB), {os.cpu_count()} threads\n")
        print(table(rows, ("writer", "best s", "MB/s", "vs zarr-python", "files vs zarr-python")))
        if a.reads:
            print(f"\n{a.reads} random 16x64x64 uint16 inner chunks of one 64x512x512 shard\n")
            print(table(reads(work, a.reads), ("reader", "ms per chunk", "vs zarr-python")))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
