"""Run a command and measure wall time and peak RSS of its whole process tree (dask workers
included), sampled every 50 ms."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from zarrmill.io.storage.guard import is_bookkeeping_name


@dataclass
class Measured:
    seconds: float
    peak_mb: float
    output: str


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc] + proc.children(recursive=True):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_measured(cmd: list[str], cwd: str | None = None) -> Measured:
    t0 = time.perf_counter()
    popen = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = peak_rss_until_exit(popen)
    out = popen.stdout.read() if popen.stdout else ""
    seconds = time.perf_counter() - t0
    if popen.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({popen.returncode}):\n{out[-3000:]}")
    return Measured(seconds, peak / 2**20, out)


def peak_rss_until_exit(popen: subprocess.Popen) -> int:
    """The process tree's peak RSS in bytes, sampled every 50 ms until the process exits."""
    proc, peak = psutil.Process(popen.pid), 0
    while popen.poll() is None:
        try:
            peak = max(peak, tree_rss(proc))
        except psutil.Error:
            pass
        time.sleep(0.05)
    return peak


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def compile_zarrmill() -> None:
    """Compile zarrmill's modules once, as pip does for an installed wheel (and for EuBI-Bridge's
    packages in its venv): an editable install under PYTHONDONTWRITEBYTECODE=1 (set on the shared
    benchmark machine) otherwise compiles its ~110 modules from source on every run, 0.3 s."""
    import compileall

    import zarrmill

    compileall.compile_dir(str(Path(zarrmill.__file__).parent), quiet=1)


def zarrmill(*args: str) -> list[str]:
    return [sys.executable, "-m", "zarrmill", *args]


def table(rows: list[tuple], headers: tuple) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def drop_caches() -> bool:
    """Empty the page cache (root only), so the next read comes from disk, as for data larger than
    RAM. Returns False where that is not allowed."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def files_and_bytes(path) -> tuple[int, int]:
    from pathlib import Path

    files = [f for f in Path(path).rglob("*") if f.is_file() and not any(is_bookkeeping_name(p) for p in f.parts)]
    return len(files), sum(f.stat().st_size for f in files)
