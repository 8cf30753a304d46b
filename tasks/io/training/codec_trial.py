"""Choose codec, level and filter by trial: compress a few sampled chunks with every candidate,
measure the compression ratio and single-thread decompression speed, pick by policy.

- ``ratio``: the highest ratio (ties: faster);
- ``speed``: among the fast codecs (lz4, lz4hc, blosclz), the fastest decompression within 10 %
  of their best ratio;
- ``balanced``: among candidates within 10 % of the best ratio, the highest ratio x
  sqrt(decompression GB/s) (the floor keeps a fast "no compression" from winning on noisy data);
- ``min_ratio`` (``choose_for_patches``): among candidates of at least that ratio, the fastest patch
  read, decompression GB/s / over-read (bytes a random patch decodes per patch byte, set by the
  block shape), so block shapes are tried too.
Speed is the best of 3 timed passes of blosc2 decompressing each sample chunk into a reused
buffer, one thread (a single timed pass was dominated by first-touch allocation and timer noise
and ranked zstd above lz4hc). Lossless only: every candidate is decompressed and compared."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal, Sequence

import numpy as np

from .b2layout import bytes_touched_factor
from .b2store import cparams

Policy = Literal["ratio", "speed", "balanced"]
CANDIDATES = [("lz4", 5), ("lz4hc", 5), ("lz4hc", 9), ("zstd", 1), ("zstd", 5), ("blosclz", 5)]
FILTER_NAMES = ("shuffle", "bitshuffle", "nofilter")
# min_ratio trials only: shuffle+bytedelta is the one filter that lifts noisy uint16 microscopy to
# ratio 2 (with zstd); among the policies' candidates it raised the best ratio enough to push LZ4HC
# out of "balanced"'s 10 % band (64^3 patches 3x slower by default)
PATCH_CANDIDATES = CANDIDATES + [("zstd", 3)]
PATCH_FILTERS = FILTER_NAMES + ("shuffle+bytedelta",)
FAST = {"lz4", "lz4hc", "blosclz"}


@dataclass(frozen=True)
class Trial:
    codec: str
    clevel: int
    filter: str
    ratio: float
    decompress_gbs: float
    blocks: tuple[int, ...] = ()
    over_read: float = 1.0

    @property
    def patch_gbs(self) -> float:
        """Patch bytes per second one thread can deliver: decoding is the bound, over-read its tax."""
        return self.decompress_gbs / self.over_read

    def as_dict(self) -> dict:
        return asdict(self)


def sample_chunks(read, shape: Sequence[int], chunks: Sequence[int], n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = [int(rng.integers(0, max(1, s - c + 1))) for s, c in zip(shape, chunks)]
        out.append(np.ascontiguousarray(read(tuple(slice(a, min(a + c, s)) for a, c, s in zip(start, chunks, shape)))))
    return out


def run_trials(samples: list[np.ndarray], blocks: Sequence[int]) -> list[Trial]:
    """Every codec x filter of the policies on ``blocks``."""
    return _trials_for(samples, blocks, CANDIDATES, FILTER_NAMES)


def run_patch_trials(samples: list[np.ndarray], blocks: Sequence[int], patch: Sequence[int],
                     more_blocks: Sequence[Sequence[int]] = ()) -> list[Trial]:
    """Every codec x filter for min_ratio on ``blocks`` and each of ``more_blocks``, with over-read."""
    trials = []
    for shape in [tuple(blocks), *(tuple(b) for b in more_blocks)]:
        over = round(bytes_touched_factor(patch, shape), 3)
        trials += [replace(t, blocks=shape, over_read=over)
                   for t in _trials_for(samples, shape, PATCH_CANDIDATES, PATCH_FILTERS)]
    return trials


def _trials_for(samples: list[np.ndarray], blocks: Sequence[int], candidates: Sequence[tuple[str, int]],
                filters: Sequence[str]) -> list[Trial]:
    import blosc2

    trials = []
    for codec, clevel in candidates:
        for filt in filters:
            raw = comp = 0
            packed = []
            for s in samples:
                b = tuple(min(x, y) for x, y in zip(blocks, s.shape))
                arr = blosc2.asarray(s, chunks=s.shape, blocks=b, cparams=cparams(codec, clevel, filt, s.itemsize),
                                     dparams={"nthreads": 1})
                if not np.array_equal(arr[...], s, equal_nan=s.dtype.kind == "f"):
                    raise RuntimeError(f"{codec}/{filt} did not round-trip")
                raw += s.nbytes
                comp += arr.schunk.cbytes
                packed.append((arr, np.empty(s.nbytes, np.uint8)))  # the array owns its schunk: keep it
            seconds = min(_decompress_seconds(packed) for _ in range(3))
            trials.append(Trial(codec, clevel, filt, raw / comp, raw / max(seconds, 1e-9) / 1e9))
    return trials


def _decompress_seconds(packed: list) -> float:
    t0 = time.perf_counter()
    for arr, buf in packed:
        arr.schunk.decompress_chunk(0, buf)
    return time.perf_counter() - t0


def choose_no_larger(trials: list[Trial], baseline: Trial) -> Trial:
    """The fastest decompression among candidates that compress at least as well as ``baseline``
    (what another tool wrote: the rewrite must not take more bytes); the baseline itself if none."""
    ok = [t for t in trials if t.ratio >= baseline.ratio]
    return max(ok, key=lambda t: (t.decompress_gbs, t.ratio)) if ok else baseline


def choose_for_patches(trials: list[Trial], min_ratio: float) -> Trial | None:
    """The fastest patch read (decompression / over-read) among candidates of ratio >= min_ratio."""
    ok = [t for t in trials if t.ratio >= min_ratio]
    return max(ok, key=lambda t: (t.patch_gbs, t.ratio)) if ok else None


def choose(trials: list[Trial], policy: Policy) -> Trial:
    if policy == "ratio":
        return max(trials, key=lambda t: (round(t.ratio, 3), t.decompress_gbs))
    if policy == "speed":
        fast = [t for t in trials if t.codec in FAST] or trials
        best = max(t.ratio for t in fast)
        return max((t for t in fast if t.ratio >= 0.9 * best), key=lambda t: t.decompress_gbs)
    best = max(t.ratio for t in trials)
    near = [t for t in trials if t.ratio >= 0.9 * best]
    return max(near, key=lambda t: t.ratio * math.sqrt(t.decompress_gbs))
