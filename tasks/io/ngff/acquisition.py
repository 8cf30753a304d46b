"""One in-memory description of an HCS acquisition, whatever the instrument: the plate, its wells,
fields of view (with stage positions), and which file holds each (t, c, z) plane.

Readers (CellVoyager, filename patterns) produce it; ``ingest`` consumes it."""
from __future__ import annotations

import string
from collections import defaultdict
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True, slots=True)  # a full plate has millions: no per-instance dict
class Plane:
    row: int  # 1-based plate row
    col: int  # 1-based plate column
    field: int  # 1-based field index within the well
    t: int  # 0-based
    c: int  # 0-based channel index
    z: int  # 0-based
    path: str  # file holding this plane (absolute)
    x_um: float  # stage position of the field's top-left corner, image x axis
    y_um: float  # same, image y axis (already flipped to image orientation)
    z_um: float = 0.0
    time: str | None = None  # acquisition time, ISO 8601 UTC
    well_name: str | None = None  # the instrument's own well name (e.g. 'B03.a1')


@dataclass
class Channel:
    label: str
    wavelength_id: str | None = None
    color: str = "FFFFFF"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Acquisition:
    name: str
    planes: list[Plane]
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
    _summary: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _parts: tuple | None = field(default=None, init=False, repr=False, compare=False)

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

    def _summarise(self) -> tuple[int, int, Mapping[tuple[int, int], tuple[int, ...]]]:
        """n_t, n_z and the wells, walked once per planes list: a full plate has millions of planes
        and every well asks (asking per well made planning quadratic in the plate's size)."""
        key = (id(self.planes), len(self.planes))
        if self._summary is None or self._summary[0] != key:
            n_t = n_z = 0
            wells: dict[tuple[int, int], set[int]] = defaultdict(set)
            for p in self.planes:
                n_t, n_z = max(n_t, p.t), max(n_z, p.z)
                wells[(p.row, p.col)].add(p.field)
            self._summary = (key, (n_t + 1, n_z + 1,
                                   MappingProxyType({k: tuple(sorted(v)) for k, v in sorted(wells.items())})))
        return self._summary[1]

    @property
    def n_t(self) -> int:
        return self._summarise()[0]

    @property
    def n_z(self) -> int:
        return self._summarise()[1]

    @property
    def has_t(self) -> bool:
        """Whether field images carry a t axis: every well of a plate has the same axes (viewers
        stack wells), so a part with one time point has one when another part has several."""
        return self.n_t > 1 or self.time_axis

    @property
    def n_c(self) -> int:
        return len(self.channels)

    def fields(self) -> dict[tuple[int, int, int], list[Plane]]:
        """(row, col, field) -> its planes, in plate order."""
        out: dict[tuple[int, int, int], list[Plane]] = defaultdict(list)
        for p in sorted(self.planes, key=lambda p: (p.row, p.col, p.field, p.t, p.c, p.z)):
            out[(p.row, p.col, p.field)].append(p)
        return dict(out)

    def wells(self) -> Mapping[tuple[int, int], tuple[int, ...]]:
        """(row, col) -> field indices (read-only: shared by every caller)."""
        return self._summarise()[2]

    def parts(self) -> list["Acquisition"]:
        """``split_parts``, made once per planes list: plan and finish of both layouts each ask, and a
        split copies every plane."""
        key = (id(self.planes), len(self.planes))
        if self._parts is None or self._parts[0] != key:
            self._parts = (key, self.split_parts())
        return self._parts[1]

    def split_parts(self) -> list["Acquisition"]:
        """The plate split by what each well was imaged with: wells sharing one set of time points,
        channels and z planes form one part (an NGFF plate acquisition), indexed on their own, so a
        well carries only its own channels and time points and nothing is zero-filled that was
        never part of its acquisition. A plate imaged alike everywhere is one part: itself."""
        seen: dict[tuple[int, int], tuple[set[int], set[int], set[int]]] = defaultdict(lambda: (set(), set(), set()))
        for p in self.planes:
            ts, cs, zs = seen[(p.row, p.col)]
            ts.add(p.t), cs.add(p.c), zs.add(p.z)
        groups: dict[tuple, set[tuple[int, int]]] = defaultdict(set)
        for well, sets in sorted(seen.items()):
            groups[tuple(tuple(sorted(s)) for s in sets)].add(well)
        if len(groups) <= 1:
            if not self.acquisition_name:
                self.acquisition_name = self.name
            return [self]
        by_well: dict[tuple[int, int], list[Plane]] = defaultdict(list)
        for p in self.planes:
            by_well[(p.row, p.col)].append(p)
        parts = []
        for number, ((ts, cs, zs), wells) in enumerate(groups.items()):
            t_of, c_of, z_of = ({v: i for i, v in enumerate(axis)} for axis in (ts, cs, zs))
            planes = [replace(p, t=t_of[p.t], c=c_of[p.c], z=z_of[p.z]) for w in sorted(wells) for p in by_well[w]]
            channels = [self.channels[c] for c in cs]
            described = ", ".join(ch.label for ch in channels) + (f"; {len(ts)} time points" if len(ts) > 1 else "")
            parts.append(replace(self, planes=planes, channels=channels, unlisted=list(self.unlisted),
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
