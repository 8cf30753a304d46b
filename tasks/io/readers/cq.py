"""Yokogawa CQ1 / CQ3000 measurement folders: the BTS parser (yokogawa.py) on a folder whose mrf
names a CQ system (bts:TargetSystem ``CQ...``). CQ records may name files in sub-folders
(``Projection/W0029F0001T0001Z000C1.tif``) and carry bts:ZImageProcessing for on-the-fly
projections (MIP, SUM): a channel with both keeps its stack, ``projections: only`` takes them."""
from __future__ import annotations

from pathlib import Path

from ..ngff.acquisition import Acquisition
from .folder_scan import FolderScan
from .yokogawa import measurement_files, read_measurement, target_system


def claims(found: FolderScan) -> bool:
    return any(target_system(mrf).upper().startswith("CQ") for mrf in measurement_files(found))


def read_cq(folder: Path, mlf: str | None = None, mrf: str | None = None, projections: bool = False,
            pixel_size_yx: tuple[float, float] | None = None) -> Acquisition:
    return read_measurement(folder, mlf, mrf, projections=projections, pixel_size_yx=pixel_size_yx)
