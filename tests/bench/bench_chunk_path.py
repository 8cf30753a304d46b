"""Writing whole shards of microscopy planes: zarrmill's chunk_io vs zarr-python's own pipeline,
the zarrs codec pipeline (Rust) and tensorstore, on the same arrays.

  python tests/bench/bench_chunk_path.py [--planes 48] [--shape 2000,2000] [--repeat 3]

Each writer gets a fresh zarr v3 array (planes x y x x uint16, shard = one plane, chunks = a
quarter plane, Blosc LZ4 + bitshuffle: what ingest writes) and writes every plane with a pool of
one thread per core. Files are compared byte for byte with zarr-python's. Optional: ``pip install
zarrs tensorstore`` (a writer whose package is missing is left out of the table)."""
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

from zarrmill.io.storage.chunk_io import write_region


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


def chunk_io(path: Path, data: list[np.ndarray]) -> None:
    arr = zarr.open_array(str(path), mode="r+")
    in_pool(lambda i: write_region(arr, (i, 0, 0), data[i][None]), data)


def zarr_python(path: Path, data: list[np.ndarray]) -> None:
    arr = zarr.open_array(str(path), mode="r+")

    def one(i: int) -> None:
        arr[i] = data[i]
    in_pool(one, data)


def zarrs_pipeline(path: Path, data: list[np.ndarray]) -> None:
    import zarrs  # noqa: F401 - registers the pipeline

    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        zarr_python(path, data)


def tensorstore_writer(path: Path, data: list[np.ndarray]) -> None:
    import tensorstore as ts

    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, open=True).result()
    futures = [arr[i].write(d) for i, d in enumerate(data)]
    for f in futures:
        f.result()


WRITERS = {"zarrmill chunk_io (today)": chunk_io, "zarr-python 3 default pipeline": zarr_python,
           "zarr-python + zarrs pipeline": zarrs_pipeline, "tensorstore": tensorstore_writer}


def files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
            and f.name != "zarr.json"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planes", type=int, default=48)
    ap.add_argument("--shape", default="2000,2000")
    ap.add_argument("--repeat", type=int, default=3)
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
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
