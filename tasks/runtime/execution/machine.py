"""What this process may use: CPUs and memory, as the scheduler or container grants them, not the
whole machine. The smallest of: CPU affinity, the cgroup's CPU quota and memory limit (v2 or v1),
and the batch allocation the process runs in (the variables each scheduler sets: schedulers/,
``allocated_cpus_variable`` and ``allocated_memory``). A ``local`` cluster started inside a 1-CPU
batch job so gets one worker, not one per node core."""
from __future__ import annotations

import math
import os
from pathlib import Path

import psutil

from .schedulers import SCHEDULERS

# the variable each scheduler sets to the CPUs it granted this job
ALLOCATED_CPUS = tuple(s.allocated_cpus_variable for s in SCHEDULERS.values() if s.allocated_cpus_variable)

CGROUP = Path("/sys/fs/cgroup")


def available_cpus(cgroup: Path = CGROUP, environ: dict[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    limits = [len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)]
    quota = _cgroup_cpus(cgroup)
    if quota:
        limits.append(max(1, math.floor(quota)))
    granted = next((n for n in (_int(env.get(name)) for name in ALLOCATED_CPUS) if n), None)
    if granted:
        limits.append(granted)
    return max(1, min(limits))


def available_memory(cgroup: Path = CGROUP, environ: dict[str, str] | None = None) -> int:
    """Bytes."""
    env = os.environ if environ is None else environ
    limits = [psutil.virtual_memory().total]
    for name in ("memory.max", "memory/memory.limit_in_bytes", "memory.limit_in_bytes"):
        value = _int(_read(cgroup / name))
        if value and value < 2**60:  # v1 reports "no limit" as a huge number
            limits.append(value)
            break
    limits += [granted for granted in (s.allocated_memory(env) for s in SCHEDULERS.values()) if granted]
    return min(limits)


def _cgroup_cpus(cgroup: Path) -> float | None:
    text = _read(cgroup / "cpu.max")  # v2: "<quota> <period>" or "max <period>"
    if text:
        quota, _, period = text.partition(" ")
        if quota != "max" and _int(quota) and _int(period):
            return int(quota) / int(period)
        return None
    for base in (cgroup / "cpu", cgroup / "cpu,cpuacct", cgroup):  # v1
        quota, period = _int(_read(base / "cpu.cfs_quota_us")), _int(_read(base / "cpu.cfs_period_us"))
        if quota and quota > 0 and period:
            return quota / period
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None
