"""Measure random patch reads like training data loaders do: N reader processes, one thread each,
random patches from random cases, for a fixed time. Optionally from a cold page cache."""
from __future__ import annotations

import multiprocessing as mp
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def _open(path: str, reader: str = "zarrmill"):
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r")
    if reader == "nnunet":  # as nnUNetDatasetBlosc2.load_case opens a case (nnunetv2 2.8.1)
        import blosc2

        blosc2.set_nthreads(1)
        return blosc2.open(urlpath=path, mode="r", dparams={"nthreads": 1}, mmap_mode="r")
    from .b2store import open_patches

    return open_patches(path)


@dataclass(frozen=True)
class PatchRun:
    rate: float  # patches/s, summed over readers
    mbs: float  # patch MB/s, summed over readers
    peak_rss_mb: float  # the largest reader's peak RSS


def _reader(paths: list[str], patch: Sequence[int], seconds: float, seed: int, start: float,
            reader: str = "zarrmill", batch: int = 1) -> tuple[int, int, int]:
    while time.time() < start:  # all readers begin together
        time.sleep(0.001)
    arrays = [_open(p, reader) for p in paths]
    rng = np.random.default_rng(seed)
    n = nbytes = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = arrays[int(rng.integers(len(arrays)))]
        out = read_patches(a, patch, rng, batch)
        n += batch
        nbytes += out.nbytes
    return n, nbytes, peak_rss()


_BATCH: dict[tuple, np.ndarray] = {}  # one reused batch array per shape, as a loader keeps its batch


def read_patches(a: Any, patch: Sequence[int], rng: np.random.Generator, batch: int = 1) -> np.ndarray:
    """One random patch as a new array (batch 1, as nnU-Net's loader reads), or ``batch`` random
    patches of ``a`` into a reused batch array (``PatchArray.read_batch``; a memmap copies in)."""
    spatial = a.shape[-len(patch):]
    size = [min(p, s) for s, p in zip(spatial, patch)]  # a case smaller than the patch: all of it
    origins = [[int(rng.integers(0, s - p + 1)) for s, p in zip(spatial, size)] for _ in range(batch)]
    lead = (slice(None),) * (len(a.shape) - len(patch))
    if batch == 1:
        out = a[lead + tuple(slice(o, o + p) for o, p in zip(origins[0], size))]
        return np.array(out) if isinstance(a, np.memmap) else out  # a memmap's view: the copy is the read
    shape = (batch, *a.shape[:len(lead)], *size)
    out = _BATCH.setdefault((shape, str(a.dtype)), np.empty(shape, a.dtype))
    if hasattr(a, "read_batch"):
        return a.read_batch(origins, size, out=out)
    for i, o in enumerate(origins):
        out[i] = a[lead + tuple(slice(x, x + p) for x, p in zip(o, size))]
    return out


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM (ru_maxrss survives exec, so a spawned reader would
    report its parent's peak), ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def warm_page_cache(paths: Sequence[str | Path]) -> None:
    """Read every file once so memory maps and compressed files start from the same warm cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 * 2**20):
                pass


def patch_throughput(paths: Sequence[str | Path], patch: Sequence[int], seconds: float = 3.0,
                     processes: int = 1, seed: int = 0, cold: bool = False,
                     reader: str = "zarrmill", batch: int = 1) -> tuple[float, float]:
    """(patches/s, MB/s) summed over ``processes`` single-threaded readers. ``reader``: zarrmill's
    ``open_patches``, or ``nnunet``: ``blosc2.open`` memory-mapped and NDArray slicing, as nnU-Net's
    dataset class reads its cases."""
    run = patch_run(paths, patch, seconds, processes, seed, cold, reader, batch)
    return run.rate, run.mbs


def patch_run(paths: Sequence[str | Path], patch: Sequence[int], seconds: float = 3.0, processes: int = 1,
              seed: int = 0, cold: bool = False, reader: str = "zarrmill", batch: int = 1) -> PatchRun:
    """``patch_throughput`` with the readers' peak RSS; ``batch``: patches per call (``read_patches``)."""
    if cold and not drop_page_cache():
        return PatchRun(float("nan"), float("nan"), float("nan"))
    args = [([str(p) for p in paths], list(patch), seconds, seed + i, time.time() + 0.5, reader, batch)
            for i in range(processes)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(processes) as pool:
        results = pool.starmap(_reader, args)
    n = sum(r[0] for r in results)
    mb = sum(r[1] for r in results) / 1e6
    return PatchRun(n / seconds, mb / seconds, max(r[2] for r in results) / 2**20)
