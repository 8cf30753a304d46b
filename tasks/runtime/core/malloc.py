"""Give freed buffers back to the system at once (glibc), so memory follows the units running now.

glibc serves a large allocation (a plane, a chunk, a well volume) from a mapping of its own and
unmaps it on free, but each such free also raises its threshold for doing so, up to 32 MiB; from
then on buffers of a few MiB come from the heap, where freed ones stay resident until the heap's
top is free, which other live objects prevent. A converter that reads and writes thousands of
planes so creeps upward: on a 48-well plate ``ingest layout: well`` peaked at 1098 MB, with a fixed
threshold at 648 MB, in the same time (manual: Performance). Fixing the thresholds turns that
adjustment off, so a worker's memory is what its units declare (runtime/core/budget.py) and not
what the allocator happened to keep. The price is a fresh mapping, page faults included, for every
buffer of 2 MiB or more. Worker processes (dask's, batch jobs) inherit the environment variables
and apply them when they start; this process applies them through ``mallopt``.

The threshold is chosen per job shape (``use_profile``, called for every unit): a unit that says
``"allocator": "speed"`` (a volume's regions: the same few large buffers again and again, which
the heap reuses) runs with a 16 MiB threshold, everything else with 2 MiB. Measured on the 537 MB
volume with its pyramid: 3.5-4.0 s at 440-450 MB instead of 4.2-4.4 s at 310-340 MB (manual: Performance).
A user's own ``MALLOC_MMAP_THRESHOLD_`` wins over both."""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from functools import lru_cache
from typing import Callable

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
# mmap threshold per job shape. steady: 2 MiB, above the scratch buffers of 1 MiB Blosc blocks
# (the plate codec's), which at 1 MiB were each a fresh mapping: 640k page faults and 3.1 s of
# system time on the 3-well plate, 320k and 2.0 s at 2 MiB (4.79 -> 3.96 s median, peak +70 MB)
PROFILES = {"steady": 2 << 20, "speed": 16 << 20}
DEFAULTS = {"MALLOC_MMAP_THRESHOLD_": PROFILES["steady"],  # and larger: mapped, unmapped on free
            "MALLOC_TRIM_THRESHOLD_": 1 << 16}  # heap tops above 64 KiB go back (dask's nanny uses the same)
OURS = "ZARRMILL_MALLOC_DEFAULTS"  # set where zarrmill chose the thresholds (children inherit both)
_applied = False
_profile = "steady"


def return_freed_memory() -> None:
    """Fix glibc's thresholds in this process and its future children; a user's own values for the
    two variables win. Elsewhere than glibc (macOS, musl) nothing to do."""
    global _applied
    if _applied:
        return
    _applied = True
    if not any(name in os.environ for name in DEFAULTS):
        os.environ[OURS] = "1"
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, str(value))
    mallopt = _mallopt()
    if mallopt is None:
        return
    for param, name in ((M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"), (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_")):
        try:
            value = int(os.environ[name])
        except ValueError:
            log.warning("%s=%r is not a number of bytes; glibc's default stays", name, os.environ[name])
            continue
        mallopt(param, value)


def use_profile(name: str) -> None:
    """The mmap threshold for the unit about to run (``PROFILES``), unless the user set one."""
    global _profile
    mallopt = _mallopt()
    if name == _profile or os.environ.get(OURS) != "1" or mallopt is None:
        return
    mallopt(M_MMAP_THRESHOLD, PROFILES[name])
    _profile = name


@lru_cache(maxsize=1)
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``; None elsewhere (macOS, musl), where there is nothing to set."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return None
