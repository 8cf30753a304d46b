"""The plate readers' contract and the list ingest picks from.

A plate reader turns what an instrument or a file format wrote into one ``Acquisition`` (the
plate, its wells, fields with stage positions, and the file and plane behind each (t, c, z)):

- ``claims(scan)``: from one scan of the input folder (folder_scan.py, names only, shared by every
  reader), whether the instrument's own marker files are there; no pixel reads, no side effects.
  Two readers claiming one folder is an error naming both, never an order;
- ``read(path, options)``: metadata only, pixels stay in their files (read later plane by plane
  by ``planes.read_plane_into``, or ``<file>::s/t/c/z`` references for multi-scene files), through
  the shared step from plane records (records.py); raises ``InputError`` naming the file and the
  field for anything it cannot use;
- ``options``: the reader-specific ingest options it takes; one set for another format is refused.

A new instrument is one module in this package plus one line in ``PLATE_READERS``; ingest does
not change. The filename-pattern reader is not listed: it needs a pattern, so it is never guessed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import InputError
from ..ngff.acquisition import Acquisition
from . import cellvoyager, cq, hcsai, imagexpress, metaxpress, operetta, scanr
from .folder_scan import FolderScan, scan
from .scenes import is_multi_scene, read_scenes


@dataclass(frozen=True)
class ReadOptions:
    pixel_size_yx: tuple[float, float] | None = None  # overrides the metadata's (y, x) micrometer
    z_step: float | None = None  # overrides the metadata's z step, micrometer
    mlf: str | None = None  # Yokogawa: measurement data file name
    mrf: str | None = None  # Yokogawa: measurement detail file name
    projections: bool = False  # the z projections instead of the z planes
    plate_shape: tuple[int, int] | None = None  # where the instrument records no plate format


@dataclass(frozen=True)
class PlateReader:
    format: str
    read_: Callable[[Path, ReadOptions], Acquisition]
    claims: Callable[[FolderScan], bool] | None = None  # folders
    claims_file: Callable[[Path], bool] | None = None  # single files
    options: frozenset[str] = frozenset()  # reader-specific ingest options it takes
    instrument: str = ""

    def detects(self, path: Path) -> bool:
        path = Path(path)
        if path.is_file():
            return bool(self.claims_file and self.claims_file(path))
        return bool(path.is_dir() and self.claims and self.claims(scan(path)))

    def read(self, path: Path, options: ReadOptions) -> Acquisition:
        acq = self.read_(Path(path), options)
        if options.z_step is not None:
            acq.z_step = options.z_step
        return acq


PLATE_READERS: tuple[PlateReader, ...] = (
    PlateReader("cellvoyager", lambda p, o: cellvoyager.read_cellvoyager(p, o.mlf, o.mrf, o.pixel_size_yx),
                claims=cellvoyager.claims, options=frozenset({"mlf", "mrf"}),
                instrument="Yokogawa CellVoyager CV7000 / CV8000"),
    PlateReader("cq", lambda p, o: cq.read_cq(p, o.mlf, o.mrf, o.projections, o.pixel_size_yx),
                claims=cq.claims, options=frozenset({"mlf", "mrf", "projections"}), instrument="Yokogawa CQ1 / CQ3000"),
    PlateReader("imagexpress", lambda p, o: imagexpress.read_imagexpress(p, o.pixel_size_yx, o.projections),
                claims=imagexpress.claims, options=frozenset({"projections"}),
                instrument="MetaXpress plate export with an .HTD"),
    PlateReader("metaxpress", lambda p, o: metaxpress.read_metaxpress(p, o.pixel_size_yx, o.projections, o.plate_shape),
                claims=metaxpress.claims, options=frozenset({"projections", "plate_shape"}),
                instrument="MetaXpress folders as acquired (no .HTD)"),
    PlateReader("hcsai", lambda p, o: hcsai.read_hcsai(p, o.pixel_size_yx, o.projections, o.plate_shape),
                claims=hcsai.claims, options=frozenset({"projections", "plate_shape"}),
                instrument="Molecular Devices ImageXpress HCS.ai"),
    PlateReader("operetta", lambda p, o: operetta.read_operetta(p, o.pixel_size_yx), claims=operetta.claims,
                instrument="Revvity Opera Phenix / Operetta CLS (Harmony export)"),
    PlateReader("scanr", lambda p, o: scanr.read_scanr(p, o.pixel_size_yx, o.plate_shape), claims=scanr.claims,
                options=frozenset({"plate_shape"}), instrument="Evident scanR"),
    PlateReader("scenes", lambda p, o: read_scenes(p, o.pixel_size_yx, o.z_step), claims_file=is_multi_scene,
                instrument="one multi-scene file (CZI, ND2, LIF, OME-TIFF of several series)"),
)


def reader(format: str) -> PlateReader | None:
    return next((r for r in PLATE_READERS if r.format == format), None)


def detect(path: Path) -> str | None:
    """The format of the one reader whose marker files are there, or None; two claiming the same
    folder is an error."""
    path = Path(path)
    if path.is_file():
        found = [r.format for r in PLATE_READERS if r.claims_file and r.claims_file(path)]
    elif path.is_dir():
        seen = scan(path)
        found = [r.format for r in PLATE_READERS if r.claims and r.claims(seen)]
    else:
        return None
    if len(found) > 1:
        raise InputError(f"{path}: holds the marker files of {' and '.join(found)} acquisitions; give the folder of "
                         "one, or set format")
    return found[0] if found else None

