"""Play a finished CellVoyager measurement back into a folder at an instrument's pace, as the
instrument writes it: the settings files first, then for each record in the mlf's order its image
file and then its record line (appended in two writes, so a reader can meet a half-written record),
and the mlf's closing tag at the end. Used by ``zarrmill follow``'s tests and benchmark
(tests/bench/bench_follow.py) and by anyone trying ``follow`` on a sample."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Callable

from ..readers.mlf import RECORD_END, ROOT_END

RECORD = re.compile(rb"<bts:MeasurementRecord\b.*?</bts:MeasurementRecord>", re.S)
FILE_NAME = re.compile(rb">([^<]*)</bts:MeasurementRecord>")


def play_cellvoyager(source: Path, dest: Path, mb_per_s: float = 50.0, well_pause: float = 0.0,
                     on_record: Callable[[int], None] | None = None, sleep: Callable[[float], None] = time.sleep,
                     end: bool = True) -> int:
    """Write ``source``'s measurement into ``dest`` (new or empty) at ``mb_per_s`` of image bytes,
    pausing ``well_pause`` seconds when the instrument moves to the next well; the records written."""
    source, dest = Path(source), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    mlf = (source / "MeasurementData.mlf").read_bytes()
    for extra in sorted(source.iterdir()):
        if extra.is_file() and extra.suffix.lower() in (".mrf", ".mes", ".wpi", ".wpp"):
            shutil.copyfile(extra, dest / extra.name)
    records = list(RECORD.finditer(mlf))
    header = mlf[:records[0].start()] if records else mlf.replace(ROOT_END, b"")
    written = 0
    with open(dest / "MeasurementData.mlf", "wb") as out:
        out.write(header)
        out.flush()
        well = None
        for n, match in enumerate(records):
            record = match.group(0)
            this_well = re.search(rb'bts:Row="(\d+)".*?bts:Column="(\d+)"|bts:Column="(\d+)".*?bts:Row="(\d+)"', record)
            key = this_well.group(0) if this_well else None
            if well is not None and key != well and well_pause:
                sleep(well_pause)
            well = key
            name = FILE_NAME.search(record)
            if name and b'bts:Type="IMG"' in record:
                image = source / name.group(1).decode()
                data = image.read_bytes()
                started = time.monotonic()
                (dest / image.name).write_bytes(data)
                left = len(data) / (mb_per_s * 1e6) - (time.monotonic() - started)
                if left > 0:
                    sleep(left)
            half = len(record) // 2
            out.write(record[:half])  # a reader polling now meets half a record
            out.flush()
            out.write(record[half:] + b"\n")
            out.flush()
            written += 1
            if on_record is not None:
                on_record(n)
        if end:
            out.write(ROOT_END + b"\n")
    assert RECORD_END  # the record end the reader cuts at is the one written here
    return written
