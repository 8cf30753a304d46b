"""Datasets for ``for_each`` workflows: found by a glob or listed in a file, ready when a marker
file exists and/or nothing in them changed for a quiet period, fingerprinted by their files'
names, sizes and mtimes (a changed fingerprint means the dataset changed and is converted again)."""
from __future__ import annotations

import glob
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    name: str
    path: Path

    def scope(self) -> dict[str, str]:
        return {"name": self.name, "path": str(self.path), "stem": self.path.stem}


def discover(pattern: str | None, list_file: str | None) -> list[Dataset]:
    if list_file:
        try:
            lines = Path(list_file).read_text().splitlines()
        except OSError as err:
            raise ConfigError(f"for_each.list: cannot read {list_file}: {err.strerror}") from None
        paths = [Path(line.strip()) for line in lines if line.strip() and not line.startswith("#")]
    else:
        paths = [Path(p) for p in sorted(glob.glob(pattern or ""))]
    found = [Dataset(p.name, p.resolve()) for p in paths if p.exists()]
    for ds in found:  # names become parts of output paths (${name})
        if ds.name in ("", ".", "..") or any(ord(ch) < 32 for ch in ds.name):
            raise ConfigError(f"for_each: dataset {str(ds.path)!r} has a name ({ds.name!r}) that cannot be part of "
                              "an output path; rename it or list its folder in for_each.list")
    return found


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file())


def readiness(ds: Dataset, marker: str | None, quiet_seconds: float) -> tuple[bool, str]:
    """(ready, why not): the marker must exist and the newest file be older than quiet_seconds."""
    if marker and not any(ds.path.glob(marker)):
        return False, f"waiting for {marker}"
    if quiet_seconds > 0:
        files = _files(ds.path)
        newest = max((f.stat().st_mtime for f in files), default=0.0)
        age = time.time() - newest
        if age < quiet_seconds:
            return False, f"files changed {age:.0f}s ago (quiet period {quiet_seconds:.0f}s)"
    return True, ""


def fingerprint(ds: Dataset) -> tuple[str, int]:
    """(hash of every file's relative path, size and mtime; total bytes)."""
    h = hashlib.sha256()
    total = 0
    for f in _files(ds.path):
        st = f.stat()
        total += st.st_size
        h.update(f"{f.relative_to(ds.path) if ds.path.is_dir() else f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16], total
