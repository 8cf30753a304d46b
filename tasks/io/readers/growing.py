"""Acquisitions still being written (``zarrmill follow``): what the instrument has recorded so far.

A source's ``poll()`` returns a ``Snapshot``: the acquisition as its metadata stands now (only
complete records) and whether the instrument has said it is done.

- CellVoyager and CQ (``GrowingMeasurement``): the mlf is read from where the last poll stopped,
  never from the start, up to its last complete ``</bts:MeasurementRecord>``: a record the
  instrument is still writing is left for the next poll. The measurement has ended when the mlf
  closes its root element (``</bts:MeasurementData>``).
- Every other plate reader (``Reread``): its metadata (an index, a folder of well files) is read
  again at each poll; metadata that cannot be read yet (an index being rewritten) is read again at
  the next poll, and the last readable one stands. These formats write no end marker: the follower
  ends after the quiet period."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import InputError
from ..ngff.acquisition import Acquisition
from .mlf import COLUMNS, RECORD_END, ROOT_END, MlfColumns, _chunk_columns, _Columns, _record_pattern
from .yokogawa import find_metadata, read_measurement


@dataclass(frozen=True)
class Snapshot:
    acquisition: Acquisition | None  # every complete record so far; None: nothing readable yet
    ended: bool  # the instrument's own end marker is there
    current: tuple[int, int] | None = None  # (row, col) of the well the instrument wrote last


class GrowingMlf:
    """An mlf read a piece at a time as the instrument appends records."""

    def __init__(self, path: Path, folder: Path):
        self.path, self.folder = Path(path), Path(folder).resolve()
        self.offset = 0  # the bytes read so far: the header and complete records
        self.layout = None
        self.columns = _Columns(1024)
        self.ended = False
        self.new_errors: list[str] = []

    def read_new(self) -> bool:
        """Read the records appended since the last call; whether there were any."""
        with open(self.path, "rb") as fh:
            if self.layout is None:
                head = fh.read(1 << 16)
                layout, start = _record_pattern(head)
                if layout is None:
                    if RECORD_END in head or len(head) == 1 << 16:
                        raise InputError(f"{self.path}: its records are not laid out one per line as "
                                         "instruments write them; it cannot be followed (convert it once complete)")
                    return False  # no complete image record yet
                self.layout, self.offset = layout, start
            size = os.fstat(fh.fileno()).st_size
            if size < self.offset:  # not appended to: written anew (a restarted measurement, a copy)
                raise InputError(f"{self.path}: it shrank from {self.offset} to {size} bytes while it was followed; "
                                 "run zarrmill follow again on the measurement as it is now")
            fh.seek(self.offset)
            data = fh.read()
        cut = data.rfind(RECORD_END)
        cut = 0 if cut < 0 else cut + len(RECORD_END)
        self.ended = data[cut:].strip() == ROOT_END
        if not cut:
            return False
        piece = _chunk_columns(data[:cut], self.layout, self.path, self.folder)
        self.new_errors = list(piece.errors)
        self.columns.add(piece)
        self.offset += cut
        return True

    def records(self, *_: Path) -> MlfColumns:
        """Every record read so far: a copy (the reader sorts its table in place); ERR records
        only the ones new since the last call (each is said once)."""
        whole = self.columns.result()
        return MlfColumns(*[getattr(whole, name).copy() for name in COLUMNS], errors=self.new_errors)


class GrowingMeasurement:
    """A CellVoyager or CQ measurement being written."""

    def __init__(self, folder: Path, read: Callable[..., Acquisition] = read_measurement, **options):
        self.folder, self.options, self.read = Path(folder), options, read
        self.mlf: GrowingMlf | None = None
        self.last: Acquisition | None = None

    def poll(self) -> Snapshot:
        if self.mlf is None:
            try:
                mlf_path, _ = find_metadata(self.folder, self.options.get("mlf"), self.options.get("mrf"))
            except InputError:
                return Snapshot(None, False)  # the instrument has not written its metadata files yet
            self.mlf = GrowingMlf(mlf_path, mlf_path.parent)
        if self.mlf.read_new() or self.last is None and len(self.mlf.columns.arrays):
            self.last = self.read(self.folder, records=self.mlf.records, **self.options)
        cols = self.mlf.columns
        current = (int(cols.arrays["row"][cols.n - 1]), int(cols.arrays["col"][cols.n - 1])) if cols.n else None
        return Snapshot(self.last, self.mlf.ended, current)


class Reread:
    """Any other plate reader: its metadata read again at each poll."""

    def __init__(self, read: Callable[[], Acquisition]):
        self.read = read
        self.last: Acquisition | None = None

    def poll(self) -> Snapshot:
        try:
            self.last = self.read()
        except InputError:  # not readable yet (no files, an index being rewritten): the last one stands
            pass
        return Snapshot(self.last, False, newest_well(self.last) if self.last is not None else None)


def newest_well(acq: Acquisition) -> tuple[int, int] | None:
    """The well of the newest image file: the one the instrument is writing."""
    tb = acq.table
    if not len(tb):
        return None
    mtimes = [os.stat(p).st_mtime_ns if os.path.isfile(p) else 0 for p in tb.paths()]
    i = max(range(len(mtimes)), key=mtimes.__getitem__)
    return int(tb.row[i]), int(tb.col[i])
