"""Yokogawa CellVoyager (CV7000 / CV8000) measurement folders: the BTS parser (yokogawa.py) on a
folder whose mrf names a CellVoyager (any system that is not a CQ)."""
from __future__ import annotations

from pathlib import Path

from ..ngff.acquisition import Acquisition
from .folder_scan import FolderScan
from .yokogawa import measurement_files, read_measurement, target_system


def claims(found: FolderScan) -> bool:
    return any(not target_system(mrf).upper().startswith("CQ") for mrf in measurement_files(found))


def read_cellvoyager(folder: Path, mlf: str | None = None, mrf: str | None = None,
                     pixel_size_yx: tuple[float, float] | None = None) -> Acquisition:
    return read_measurement(folder, mlf, mrf, projections=False, pixel_size_yx=pixel_size_yx)
