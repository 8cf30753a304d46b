"""The planes of an acquisition as columns: one numpy array per property (row, column, field, t,
c, z, stage x/y/z) and one array of file names relative to one folder.

A 1536-well plate has millions of planes. As Python objects (a record, a plane, its path) they
took ~2.4 KB each and 0.2 ms to make and check (tests/bench/bench_driver.py); as columns they take
~130 bytes and the plate-wide questions (wells, fields, time points, duplicates, stage origins)
are array operations. ``Plane`` objects are made only for the few callers that ask for one
(``FieldPlanes``: the planes of one field, made on demand)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

INT_COLUMNS = ("row", "col", "field", "t", "c", "z")
FLOAT_COLUMNS = ("x_um", "y_um", "z_um")


@dataclass(frozen=True, slots=True)  # made on demand only: a full plate's planes stay columns
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


@dataclass(eq=False)
class PlaneTable:
    """Columns of equal length, sorted in plate order (row, col, field, t, c, z) by ``sorted()``."""

    row: np.ndarray
    col: np.ndarray
    field: np.ndarray
    t: np.ndarray
    c: np.ndarray
    z: np.ndarray
    x_um: np.ndarray
    y_um: np.ndarray
    z_um: np.ndarray
    names: np.ndarray  # bytes (utf-8) of each plane's file, relative to ``folder``
    folder: str = ""  # "" when names are whole paths (or ``file::s/t/c/z`` references)
    times: np.ndarray | None = None  # bytes, as the reader keeps them (see ``time_text``)
    wells: np.ndarray | None = None  # bytes: the instrument's own well name
    # raw time -> ISO 8601 UTC, applied to the few planes whose time is written (a reader that
    # converts every time of millions of planes spends seconds on values nobody reads)
    time_text: Callable[[str], str] | None = field(default=None, repr=False)
    well_of_name: Callable[[str], str | None] | None = field(default=None, repr=False)
    ordered: bool = field(default=False, repr=False)  # known to be in plate order (``sorted``)

    def __len__(self) -> int:
        return len(self.row)

    @classmethod
    def from_planes(cls, planes: Sequence[Plane]) -> "PlaneTable":
        def ints(name: str) -> np.ndarray:
            return np.fromiter((getattr(p, name) for p in planes), np.int64, len(planes))

        def floats(name: str) -> np.ndarray:
            return np.fromiter((getattr(p, name) or 0.0 for p in planes), np.float64, len(planes))

        names = np.array([os.fsencode(p.path) for p in planes] or [b""], dtype=bytes)[:len(planes)]
        return cls(*(ints(n) for n in INT_COLUMNS), *(floats(n) for n in FLOAT_COLUMNS), names=names,
                   times=text_column([p.time for p in planes]),
                   wells=text_column([p.well_name for p in planes])).sorted()

    def take(self, index: np.ndarray | slice) -> "PlaneTable":
        """The planes at ``index`` (kept in their order), sharing the folder and converters."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]

        return PlaneTable(*(getattr(self, n)[index] for n in INT_COLUMNS + FLOAT_COLUMNS), names=self.names[index],
                          folder=self.folder, times=pick(self.times), wells=pick(self.wells),
                          time_text=self.time_text, well_of_name=self.well_of_name)

    def sorted(self) -> "PlaneTable":
        if self.ordered:
            return self
        order = np.lexsort((self.z, self.c, self.t, self.field, self.col, self.row))
        out = self if np.all(order[1:] > order[:-1]) else self.take(order)
        out.ordered = True
        return out

    def sort(self) -> "PlaneTable":
        """``sorted`` in place, one column at a time: a full plate's table is ~400 MB, and a sorted
        copy beside it doubled the driver's peak. Only for a table nothing else holds yet."""
        if not self.ordered:
            order = np.lexsort((self.z, self.c, self.t, self.field, self.col, self.row))
            if not np.all(order[1:] > order[:-1]):
                for name in INT_COLUMNS + FLOAT_COLUMNS + ("names", "times", "wells"):
                    column = getattr(self, name)
                    if column is not None:
                        setattr(self, name, column[order])
                        del column
            self.ordered = True
        return self

    def with_columns(self, ordered: bool = False, **columns: np.ndarray) -> "PlaneTable":
        """A copy with ``columns`` replaced; ``ordered``: the new values keep the plate order."""
        out = self.take(slice(None))
        for name, values in columns.items():
            setattr(out, name, values)
        out.ordered = self.ordered and ordered
        return out

    def path(self, i: int) -> str:
        name = os.fsdecode(self.names[i])
        return os.path.join(self.folder, name) if self.folder else name

    def paths(self, index: np.ndarray | slice | None = None) -> list[str]:
        names = self.names if index is None else self.names[index]
        if not self.folder:
            return [os.fsdecode(n) for n in names]
        prefix = self.folder.rstrip("/") + "/"
        return [prefix + os.fsdecode(n) for n in names]

    def time(self, i: int) -> str | None:
        if self.times is None or self.times[i] == b"":
            return None
        text = self.times[i].decode()
        return self.time_text(text) if self.time_text else text

    def well_name(self, i: int) -> str | None:
        if self.wells is not None:
            return None if self.wells[i] == b"" else self.wells[i].decode()
        return self.well_of_name(os.fsdecode(self.names[i])) if self.well_of_name else None

    def plane(self, i: int) -> Plane:
        return Plane(int(self.row[i]), int(self.col[i]), int(self.field[i]), int(self.t[i]), int(self.c[i]),
                     int(self.z[i]), self.path(i), float(self.x_um[i]), float(self.y_um[i]), float(self.z_um[i]),
                     self.time(i), self.well_name(i))

    def boundaries(self, *columns: str) -> np.ndarray:
        """Start of each run of equal values of ``columns`` (table sorted), then len: runs are
        ``[b[k], b[k + 1])``."""
        n = len(self)
        if n == 0:
            return np.zeros(1, np.int64)
        change = np.zeros(n, bool)
        change[0] = True
        for name in columns:
            a = getattr(self, name)
            change[1:] |= a[1:] != a[:-1]
        return np.append(np.flatnonzero(change), n)

    @property
    def nbytes(self) -> int:
        arrays = [getattr(self, n) for n in INT_COLUMNS + FLOAT_COLUMNS] + [self.names, self.times, self.wells]
        return sum(a.nbytes for a in arrays if a is not None)


def text_column(values: Sequence[str | None]) -> np.ndarray | None:
    """Optional text per plane as bytes (b"" for none); None when no plane has one."""
    if all(v is None for v in values):
        return None
    return np.array([b"" if v is None else v.encode() for v in values], dtype=bytes)


class FieldPlanes(Sequence[Plane]):
    """The planes of one field (a run of the sorted table): ``Plane`` objects on demand; ``files``
    and ``by_key`` for callers that need every plane's file without an object per plane."""

    def __init__(self, table: PlaneTable, start: int, stop: int):
        self.table, self.start, self.stop = table, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.table.plane(self.start + i)

    def __iter__(self) -> Iterator[Plane]:
        return (self.table.plane(i) for i in range(self.start, self.stop))

    def column(self, name: str) -> np.ndarray:
        return getattr(self.table, name)[self.start:self.stop]

    def files(self) -> list[list]:
        """[t, c, z, path] of every plane, in (t, c, z) order."""
        ts, cs, zs = (self.column(n).tolist() for n in ("t", "c", "z"))
        return [list(k) for k in zip(ts, cs, zs, self.table.paths(slice(self.start, self.stop)))]

    def by_key(self) -> dict[tuple[int, int, int], int]:
        """(t, c, z) -> the plane's row in the table."""
        ts, cs, zs = (self.column(n).tolist() for n in ("t", "c", "z"))
        return {k: self.start + i for i, k in enumerate(zip(ts, cs, zs))}
