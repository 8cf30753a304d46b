"""The measurement data file (``MeasurementData.mlf``) of a Yokogawa measurement, read into columns.

A 1536-well plate's mlf lists millions of images (a 949 MB file for 2.76 M planes). Read element by
element with ElementTree it took over a minute before a single check. Instruments write one
record per line with the same attributes in the same order, so the file is read in chunks of
32 MB, and each chunk's records are matched by one regular expression made from the first
record's attribute names. The values become numpy columns in one conversion per column. A chunk
that is anything else (another attribute order, ERR records, entities, comments, names with
folders, a value that is not a number) is read element by element, as before, with the same
one-line errors, so the fast path changes nothing but the time it takes.

Stage Y points the other way from image rows; the reader flips it (yokogawa.py)."""
from __future__ import annotations

import io
import math
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from ...errors import InputError
from ..ngff.acquisition import row_name
from .records import relative_file

NS = "{http://www.yokogawa.co.jp/BTS/BTSSchema/1.0}"
NS_URI = NS.strip("{}").encode()
CHUNK = 32 * 2**20
RECORD_END = b"</bts:MeasurementRecord>"
ROOT_END = b"</bts:MeasurementData>"
# the attributes a plane needs; ZImageProcessing (CQ projections) always takes the element path
NEEDED = {"Type", "Row", "Column", "FieldIndex", "ZIndex", "Ch", "X", "Y", "Z", "Time", "TimePoint"}
INTS = {"Row": 1, "Column": 1, "FieldIndex": 1, "ZIndex": 0, "Ch": 1, "TimePoint": 0, "TimelineIndex": 0}
FLOATS = ("X", "Y", "Z")
ISO_TIMES = re.compile(rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)?\n)*")


@dataclass
class MlfColumns:
    """One entry per image record: t is (timeline, time point) as one key (``time_key``), names
    are relative to the measurement folder, times as the mlf has them (``utc`` converts one)."""

    row: np.ndarray
    col: np.ndarray
    field: np.ndarray
    t: np.ndarray
    z: np.ndarray
    ch: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z_um: np.ndarray
    names: np.ndarray
    times: np.ndarray
    projection: np.ndarray
    errors: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.row)


COLUMNS = ("row", "col", "field", "t", "z", "ch", "x", "y", "z_um", "names", "times", "projection")


def attr(el: ET.Element, name: str, path: Path) -> str:
    value = el.get(NS + name)
    if value is None:
        raise InputError(f"{path}: <{el.tag.replace(NS, 'bts:')}> lacks bts:{name}")
    return value


def whole_attr(el: ET.Element, name: str, path: Path, low: int = 0) -> int:
    """A whole-number attribute, at least ``low``; anything else names the file, element and value."""
    text = attr(el, name, path)
    try:
        value = int(text.strip())
    except ValueError:
        raise InputError(f"{path}: bts:{name}={text!r} in <{el.tag.replace(NS, 'bts:')}> is not a whole number") from None
    if value < low:
        raise InputError(f"{path}: bts:{name}={value} in <{el.tag.replace(NS, 'bts:')}> must be at least {low}")
    return value


def number_attr(el: ET.Element, name: str, path: Path, positive: bool = False) -> float:
    """A finite number (stage positions, pixel sizes); NaN or infinity would be written into metadata."""
    text = attr(el, name, path)
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        need = "a number > 0" if positive else "a finite number"
        raise InputError(f"{path}: bts:{name}={text!r} in <{el.tag.replace(NS, 'bts:')}> must be {need}")
    return value


def utc(text: str, path: Path) -> str:
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc).isoformat(timespec="milliseconds")
    except ValueError:
        raise InputError(f"{path}: bts:Time={text!r} is not an ISO date and time") from None


def parse_mlf(source: Path | io.BytesIO, errors: list[str] | None = None, name: Path | None = None,
              allow_empty: bool = False) -> list[dict]:
    """The image records, element by element (``source`` a file, or a chunk of one; messages name
    ``name`` or the file). ERR records (a field the instrument could not image, e.g. autofocus
    failed) are described in ``errors``."""
    path = name or source
    records = []
    for el in _root_children(source, NS + "MeasurementRecord", path):
        kind = el.get(NS + "Type")
        if kind == "ERR" and errors is not None:
            errors.append(_error_record(el, path))
        if kind != "IMG":
            continue  # ERR/other records carry no image
        records.append({
            "file": (el.text or "").strip(),
            "row": whole_attr(el, "Row", path, 1), "col": whole_attr(el, "Column", path, 1),
            "field": whole_attr(el, "FieldIndex", path, 1), "t": _time_key(el, path),
            "z": whole_attr(el, "ZIndex", path), "ch": whole_attr(el, "Ch", path, 1),
            "x": number_attr(el, "X", path), "y": number_attr(el, "Y", path),
            "z_um": number_attr(el, "Z", path), "time": utc(attr(el, "Time", path), path),
            "projection": bool((el.get(NS + "ZImageProcessing") or "").strip()),  # CQ: MIP, SUM, ...
        })
    if not records and not allow_empty:
        raise InputError(f"{path}: no image records (bts:MeasurementRecord with bts:Type=IMG)")
    return records


TIMELINE_STEP = 1_000_000  # time points of one timeline sort before the next timeline's


def _time_key(el: ET.Element, path: Path) -> int:
    """Timeline, then time point: a well imaged by two timelines (each counting its time points
    from 1) has both, in timeline order, never two files for one plane."""
    timeline = whole_attr(el, "TimelineIndex", path) if el.get(NS + "TimelineIndex") is not None else 0
    point = whole_attr(el, "TimePoint", path)
    if point >= TIMELINE_STEP:
        raise InputError(f"{path}: bts:TimePoint={point} must be below {TIMELINE_STEP}")
    return timeline * TIMELINE_STEP + point


def _error_record(el: ET.Element, path: Path) -> str:
    """'B03 field 4 time point 1: "Autofocus failed"': where, as far as the record says (an
    autofocus failure names no field, only the stage position), and the instrument's own message."""
    row, col = whole_attr(el, "Row", path, 1), whole_attr(el, "Column", path, 1)
    where = f"{row_name(row)}{col:02d}"
    if el.get(NS + "FieldIndex") is not None:
        where += f" field {whole_attr(el, 'FieldIndex', path, 1)}"
    elif el.get(NS + "X") is not None and el.get(NS + "Y") is not None:
        where += f" at stage x={number_attr(el, 'X', path):g}, y={number_attr(el, 'Y', path):g}"
    if el.get(NS + "TimePoint") is not None:
        where += f" time point {whole_attr(el, 'TimePoint', path)}"
    message = " ".join((el.text or "").split()) or "no message"
    return f'{where}: "{message}"'


def _root_children(source: Path | io.BytesIO, tag: str, path: object) -> Iterator[ET.Element]:
    """The root element's children named ``tag``, one at a time, each cleared once used."""
    depth = 0
    try:
        for event, el in ET.iterparse(source, events=("start", "end")):
            depth += 1 if event == "start" else -1
            if event == "end" and depth == 1:
                if el.tag == tag:
                    yield el
                el.clear()
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from err




class _Slow(Exception):
    """This chunk is not in the one-record-per-match layout: read it element by element."""


def read_mlf(path: Path, folder: Path) -> MlfColumns:
    """Every image record of the mlf as columns, ERR records described in ``errors``; the same
    result and the same errors as ``parse_mlf``, in a fraction of the time for instrument-written files."""
    folder = Path(folder).resolve()
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
        layout, body_start = _record_pattern(head)
        if layout is None:
            return _columns_of(parse_mlf(path, errors := []), folder, path, errors)
        fh.seek(body_start)
        # the records of a 32 MB chunk go straight into columns sized for the whole file (~one
        # record per len(first record) bytes), not into pieces concatenated at the end (2x the peak)
        columns = _Columns(os.path.getsize(path) // max(len(head) // max(head.count(RECORD_END), 1), 1))
        rest = b""
        while True:
            data = fh.read(CHUNK)
            block = rest + data
            if not data:
                break
            cut = block.rfind(RECORD_END)
            cut = 0 if cut < 0 else cut + len(RECORD_END)
            chunk, rest = block[:cut], block[cut:]
            if chunk:
                columns.add(_chunk_columns(chunk, layout, path, folder))
    tail = rest.strip()
    if tail != ROOT_END:  # truncated, or something after the records: the element path says what
        return _columns_of(parse_mlf(path, errors := []), folder, path, errors)
    out = columns.result()
    if not len(out):
        raise InputError(f"{path}: no image records (bts:MeasurementRecord with bts:Type=IMG)")
    return out


@dataclass(frozen=True)
class _Layout:
    pattern: re.Pattern[bytes]  # one record, its values as groups
    names: list[str]  # the groups' attribute names, then "file"


def _record_pattern(head: bytes) -> tuple[_Layout | None, int]:
    """The regular expression for records laid out as the first one is, and where records begin."""
    root = re.search(rb"<bts:MeasurementData\b[^>]*>", head)
    first = re.search(rb'<bts:MeasurementRecord\b(?=[^>]*bts:Type="IMG")([^>]*)>', head)  # not an ERR record
    if root is None or first is None or b'xmlns:bts="' + NS_URI + b'"' not in root.group(0):
        return None, 0
    names = [n.decode() for n in re.findall(rb'bts:(\w+)="', first.group(1))]
    if not NEEDED <= set(names) or "ZImageProcessing" in names or len(set(names)) != len(names):
        return None, 0
    parts = [rb"<bts:MeasurementRecord"]
    for name in names:
        value = rb'"IMG"' if name == "Type" else rb'"([^"<&]*)"'
        parts.append(rb"\s+bts:" + name.encode() + rb"=" + value)
    parts.append(rb"\s*>([^<&]*)</bts:MeasurementRecord>")
    return _Layout(re.compile(b"".join(parts)), [n for n in names if n != "Type"] + ["file"]), root.end()


def _chunk_columns(chunk: bytes, layout: _Layout, path: Path, folder: Path) -> MlfColumns:
    found = layout.pattern.findall(chunk)
    try:
        if not found or len(found) * 2 != chunk.count(b"<") or b"&" in chunk:
            raise _Slow
        return _fast_columns(found, layout.names, path)
    except _Slow:
        wrapped = b'<bts:MeasurementData xmlns:bts="' + NS_URI + b'">' + chunk + ROOT_END
        errors: list[str] = []
        try:
            records = parse_mlf(io.BytesIO(wrapped), errors, name=path, allow_empty=True)
        except InputError as err:
            if "not valid XML" in str(err):
                parse_mlf(path)  # the whole file, for the line and column of the error
            raise
        return _columns_of(records, folder, path, errors)


def _fast_columns(found: list[tuple[bytes, ...]], names: list[str], path: Path) -> MlfColumns:
    values = dict(zip(names, zip(*found)))
    try:
        ints = {k: np.array(values[k]).astype(np.int64) for k in INTS if k in values}
        floats = {k: np.array(values[k]).astype(np.float64) for k in FLOATS}
    except ValueError:
        raise _Slow from None
    if any((ints[k] < low).any() for k, low in INTS.items() if k in ints):
        raise _Slow
    if not all(np.isfinite(a).all() for a in floats.values()) or (ints["TimePoint"] >= TIMELINE_STEP).any():
        raise _Slow
    times = np.array(values["Time"])
    if not ISO_TIMES.fullmatch(b"\n".join(values["Time"]) + b"\n"):
        raise _Slow
    files = np.strings.strip(np.array(values["file"]))
    joined = b"\n".join(files.tolist())
    if b"/" in joined or b"\\" in joined or b":" in joined or np.isin(files, [b"", b".", b".."]).any():
        raise _Slow  # names with folders are checked one by one (records.relative_file)
    timeline = ints.get("TimelineIndex", np.zeros_like(ints["TimePoint"]))
    return MlfColumns(ints["Row"], ints["Column"], ints["FieldIndex"], timeline * TIMELINE_STEP + ints["TimePoint"],
                      ints["ZIndex"], ints["Ch"], floats["X"], floats["Y"], floats["Z"], files, times,
                      np.zeros(len(files), bool))


def _columns_of(records: list[dict], folder: Path, path: Path, errors: list[str]) -> MlfColumns:
    """Columns from ``parse_mlf``'s records (the element path)."""
    prefix = len(str(folder)) + 1
    names = [os.fsencode(str(relative_file(folder, r["file"], path, "MeasurementRecord file"))[prefix:])
             for r in records]

    def col(key: str, dtype: type) -> np.ndarray:
        return np.fromiter((r[key] for r in records), dtype, len(records))

    return MlfColumns(col("row", np.int64), col("col", np.int64), col("field", np.int64), col("t", np.int64),
                      col("z", np.int64), col("ch", np.int64), col("x", np.float64), col("y", np.float64),
                      col("z_um", np.float64), np.array(names or [b""], dtype=bytes)[:len(names)],
                      np.array([r["time"].encode() for r in records] or [b""], dtype=bytes)[:len(records)],
                      col("projection", bool), errors)


class _Columns:
    """Columns filled piece by piece, grown by half when the estimate was short (and a text column
    widened when a piece's values are longer)."""

    def __init__(self, estimate: int):
        self.capacity, self.n = max(int(estimate * 1.02), 1024), 0
        self.arrays: dict[str, np.ndarray] = {}
        self.errors: list[str] = []

    def add(self, piece: MlfColumns) -> None:
        self.errors += piece.errors
        end = self.n + len(piece)
        if end > self.capacity:
            self.capacity = max(end, int(self.capacity * 1.5))
            for name, a in self.arrays.items():
                grown = np.empty(self.capacity, a.dtype)
                grown[:self.n] = a[:self.n]
                self.arrays[name] = grown
        for name in COLUMNS:
            values = getattr(piece, name)
            a = self.arrays.get(name)
            if a is None or a.dtype.itemsize < values.dtype.itemsize and a.dtype.kind == "S":
                wider = np.empty(self.capacity, values.dtype if a is None else values.dtype)
                if a is not None:
                    wider[:self.n] = a[:self.n]
                a = self.arrays[name] = wider
            a[self.n:end] = values
        self.n = end

    def result(self) -> MlfColumns:
        if not self.arrays:
            return _columns_of([], Path("/"), Path("/"), self.errors)
        trim = self.n < 0.9 * self.capacity  # a view of a much larger buffer would keep it all
        cols = [self.arrays[name][:self.n].copy() if trim else self.arrays[name][:self.n] for name in COLUMNS]
        return MlfColumns(*cols, errors=self.errors)
