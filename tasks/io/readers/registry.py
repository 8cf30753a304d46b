"""The plate readers' contract and the list ingest picks from.

A plate reader turns what an instrument or a file format wrote into one ``Acquisition`` (the
plate, its wells, fields with stage positions, and the file and plane behind each (t, c, z)):

- ``detects(path)``: cheap (names and a few folder levels only, no pixel reads), no side effects;
- ``read(path, options)``: metadata only, pixels stay in their files (read later plane by plane
  by ``planes.read_plane_into``, or ``<file>::s/t/c/z`` references for multi-scene files);
  raises ``InputError`` naming the file and the field for anything it cannot use.

A new instrument is one module in this package plus one line in ``PLATE_READERS``; ingest does
not change. The filename-pattern reader is not listed: it needs a pattern, so it is never guessed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..ngff.acquisition import Acquisition
from .cellvoyager import has_measurement, read_cellvoyager
from .imagexpress import has_htd, read_imagexpress
from .scenes import is_multi_scene, read_scenes


@dataclass(frozen=True)
class ReadOptions:
    pixel_size_yx: tuple[float, float] | None = None  # overrides the metadata's (y, x) micrometer
    z_step: float | None = None  # overrides the metadata's z step, micrometer
    mlf: str | None = None  # CellVoyager: measurement data file name
    mrf: str | None = None  # CellVoyager: measurement detail file name
    projections: bool = False  # ImageXpress: the z projections instead of the z planes


@dataclass(frozen=True)
class PlateReader:
    format: str
    detects: Callable[[Path], bool]
    read: Callable[[Path, ReadOptions], Acquisition]


# In the order ``format: auto`` tries them (an ImageXpress plate folder may also hold other files).
PLATE_READERS: tuple[PlateReader, ...] = (
    PlateReader("imagexpress", lambda p: p.is_dir() and has_htd(p),
           lambda p, o: read_imagexpress(p, o.pixel_size_yx, o.z_step, o.projections)),
    PlateReader("cellvoyager", lambda p: p.is_dir() and has_measurement(p),
           lambda p, o: read_cellvoyager(p, o.mlf, o.mrf)),
    PlateReader("scenes", lambda p: p.is_file() and is_multi_scene(p),
           lambda p, o: read_scenes(p, o.pixel_size_yx, o.z_step)),
)


def reader(format: str) -> PlateReader | None:
    return next((r for r in PLATE_READERS if r.format == format), None)


def detect(path: Path) -> str | None:
    """The format of the first reader that recognises ``path``, or None."""
    return next((r.format for r in PLATE_READERS if r.detects(path)), None)
