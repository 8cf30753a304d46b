"""One in-memory description of an HCS acquisition, whatever the instrument: the plate, its wells,
fields of view (with stage positions), and which file holds each (t, c, z) plane.

Readers (CellVoyager, filename patterns) produce it; ``ingest`` consumes it."""
from __future__ import annotations

import string
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from .plane_table import FieldPlanes, Plane, PlaneTable

__all__ = ["Acquisition", "Channel", "FieldPlanes", "Plane", "PlaneTable", "row_name", "col_name", "row_index"]


@dataclass
class Channel:
    label: str
    wavelength_id: str | None = None
    color: str = "FFFFFF"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Acquisition:
    """``planes`` is given as ``Plane`` objects or a ``PlaneTable`` and kept as the table
    (``table``, sorted in plate order); ``planes`` is then a view making ``Plane`` objects on
    demand, for small callers. Plate-wide questions are answered from the columns."""

    name: str
    planes: Sequence[Plane] | PlaneTable
    channels: list[Channel]
    pixel_size_yx: tuple[float, float]
    z_step: float
    image_shape_yx: tuple[int, int]
    dtype: str
    n_rows: int
    n_cols: int
    bit_depth: int | None = None
    source: str = ""
    well_names: str = "plate"  # "fractal": 1536-well plates named as Fractal names them (Ba/031)
    unlisted: list[str] = field(default_factory=list)  # instrument image files no record names
    acquisition_id: int = 0  # the NGFF plate acquisition its wells belong to (``parts``)
    acquisition_name: str = ""
    time_axis: bool = False  # a t axis even at one time point: another part of the plate has several
    table: PlaneTable = field(init=False, repr=False, compare=False)
    _summary: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _parts: list | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = self.planes
        if isinstance(given, FieldPlanes):
            table = given.table if (given.start, given.stop) == (0, len(given.table)) else \
                given.table.take(slice(given.start, given.stop))
        elif isinstance(given, PlaneTable):
            table = given.sorted()
        else:
            table = PlaneTable.from_planes(list(given))
        self.table = table
        self.planes = FieldPlanes(table, 0, len(table))

    def row_label(self, row: int) -> str:
        """The plate row's name in the output (NGFF row path)."""
        if self.well_names == "fractal" and (self.n_rows, self.n_cols) == (32, 48):
            return row_name((row - 1) // 4 + 1) + "abcd"[(row - 1) % 4]
        return row_name(row)

    def col_label(self, col: int) -> str:
        """The plate column's name in the output (NGFF column path)."""
        if self.well_names == "fractal" and (self.n_rows, self.n_cols) == (32, 48):
            return f"{(col - 1) // 4 + 1:02d}{(col - 1) % 4 + 1}"
        return col_name(col, self.n_cols)

    def _summarise(self) -> tuple:
        """n_t, n_z, the wells and the fields, from the columns once per table."""
        if self._summary is None or self._summary[0] is not self.table:
            tb = self.table
            n_t = int(tb.t.max()) + 1 if len(tb) else 1
            n_z = int(tb.z.max()) + 1 if len(tb) else 1
            bounds = tb.boundaries("row", "col", "field")
            starts = bounds[:-1]
            keys = zip(tb.row[starts].tolist(), tb.col[starts].tolist(), tb.field[starts].tolist())
            fields = {key: FieldPlanes(tb, a, b) for key, a, b in zip(keys, starts.tolist(), bounds[1:].tolist())}
            wells: dict[tuple[int, int], list[int]] = {}
            for row, col, fld in fields:
                wells.setdefault((row, col), []).append(fld)
            self._summary = (tb, n_t, n_z, MappingProxyType({k: tuple(v) for k, v in wells.items()}), fields)
        return self._summary

    @property
    def n_t(self) -> int:
        return self._summarise()[1]

    @property
    def n_z(self) -> int:
        return self._summarise()[2]

    @property
    def has_t(self) -> bool:
        """Whether field images carry a t axis: every well of a plate has the same axes (viewers
        stack wells), so a part with one time point has one when another part has several."""
        return self.n_t > 1 or self.time_axis

    @property
    def n_c(self) -> int:
        return len(self.channels)

    def fields(self) -> dict[tuple[int, int, int], FieldPlanes]:
        """(row, col, field) -> its planes, in plate order (a view per field, no object per plane)."""
        return dict(self._summarise()[4])

    def wells(self) -> Mapping[tuple[int, int], tuple[int, ...]]:
        """(row, col) -> field indices (read-only: shared by every caller)."""
        return self._summarise()[3]

    def well_origins(self) -> dict[tuple[int, int], tuple[float, float]]:
        """(row, col) -> (min y, min x) stage position over the well's fields."""
        tb = self.table
        bounds = tb.boundaries("row", "col")
        if len(tb) == 0:
            return {}
        starts = bounds[:-1]
        ys, xs = np.minimum.reduceat(tb.y_um, starts), np.minimum.reduceat(tb.x_um, starts)
        return {(r, c): (y, x) for r, c, y, x in zip(tb.row[starts].tolist(), tb.col[starts].tolist(),
                                                      ys.tolist(), xs.tolist())}

    def parts(self) -> list["Acquisition"]:
        """``split_parts``, made once per table: plan and finish of both layouts each ask."""
        if self._parts is None or self._parts[0] is not self.table:
            self._parts = [self.table, self.split_parts()]
        return self._parts[1]

    def split_parts(self) -> list["Acquisition"]:
        """The plate split by what each well was imaged with: wells sharing one set of time points,
        channels and z planes form one part (an NGFF plate acquisition), indexed on their own, so a
        well carries only its own channels and time points and nothing is zero-filled that was
        never part of its acquisition. A plate imaged alike everywhere is one part: itself."""
        tb = self.table
        bounds = tb.boundaries("row", "col")
        groups: dict[tuple, list[tuple[int, int]]] = {}
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            key = tuple(tuple(np.unique(getattr(tb, n)[a:b]).tolist()) for n in ("t", "c", "z"))
            groups.setdefault(key, []).append((a, b))
        if len(groups) <= 1:
            if not self.acquisition_name:
                self.acquisition_name = self.name
            return [self]
        parts = []
        for number, ((ts, cs, zs), runs) in enumerate(groups.items()):
            sub = tb.take(np.concatenate([np.arange(a, b) for a, b in runs]))
            sub = sub.with_columns(**{n: np.searchsorted(np.array(v), getattr(sub, n))
                                      for n, v in (("t", ts), ("c", cs), ("z", zs))})
            channels = [self.channels[c] for c in cs]
            described = ", ".join(ch.label for ch in channels) + (f"; {len(ts)} time points" if len(ts) > 1 else "")
            parts.append(replace(self, planes=sub, channels=channels, unlisted=list(self.unlisted),
                                 acquisition_id=number, acquisition_name=f"{self.name} ({described})",
                                 time_axis=self.n_t > 1))
        return parts

def row_name(row: int) -> str:
    """1 -> A, 26 -> Z, 27 -> AA (1536-well plates have 32 rows: A..AF)."""
    letters = string.ascii_uppercase
    return letters[row - 1] if row <= 26 else letters[(row - 1) // 26 - 1] + letters[(row - 1) % 26]


def col_name(col: int, n_cols: int) -> str:
    return str(col).zfill(2 if n_cols < 100 else 3)


def row_index(name: str) -> int:
    """Inverse of row_name: A -> 1, AA -> 27."""
    value = 0
    for ch in name.upper():
        value = value * 26 + (ord(ch) - ord("A") + 1)
    return value
