"""A ZIP64 archive of stored (uncompressed) entries, written front to back and resumable.

Python's ``zipfile`` writes the same format, but a killed write leaves an archive it cannot
continue (no central directory, and ``ZipFile`` cannot adopt the entries already written). Packing
a plate deletes each file once it is in the archive, so a resume must continue the same archive.
Here finished entries are appended to a journal (name, offset, size, CRC-32) by :meth:`commit`,
after their bytes are synced (their sources may be deleted only then); a resume truncates the
archive to the end of the last journaled entry and goes on. The
central directory, the ZIP64 end records and the archive comment are written by :meth:`close`.

Layout (PKWARE APPNOTE 6.3): local headers always carry a ZIP64 extra field with both sizes (as
``zipfile`` does with ``force_zip64``); the central directory carries one only for values that do
not fit 32 bits; the ZIP64 end of central directory record and its locator are always written.
Timestamps are fixed (1980-01-01), so the same files give the same bytes."""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .guard_fs import open_own_file, open_regular

LOCAL = struct.Struct("<IHHHHHIIIHH")
CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
END64 = struct.Struct("<IQHHIIQQQQ")
LOCATOR = struct.Struct("<IIQI")
END = struct.Struct("<IHHHHIIH")
ZIP64_EXTRA = 0x0001
VERSION = 45  # 4.5: ZIP64
UTF8 = 0x0800  # names are UTF-8
DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, 00:00
MAX32 = 0xFFFFFFFF
BLOCK = 16 << 20


@dataclass(frozen=True)
class Entry:
    name: str
    offset: int  # of its local header
    size: int
    crc: int

    @property
    def end(self) -> int:
        return self.offset + LOCAL.size + len(self.name.encode()) + 20 + self.size


class ZipWriter:
    """Stored entries into ``path``; ``journal`` lists the finished ones (a resume reads it)."""

    def __init__(self, path: Path, journal: Path):
        self.path, self.journal = Path(path), Path(journal)
        self.entries = _read_journal(self.journal)
        self.names = {e.name for e in self.entries}
        end = self.entries[-1].end if self.entries else 0
        # both of zarrmill's own making, in its bookkeeping folder: never opened through a link
        self._file: BinaryIO = open(open_own_file(self.path, os.O_RDWR), "r+b")
        self._file.truncate(end)  # a half-written entry after the last journaled one goes
        self._file.seek(end)
        self._log = open(open_own_file(self.journal, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8")
        self._pending: list[Entry] = []  # added, not yet journaled (their sources must stay)

    def add(self, name: str, source: Path) -> Entry:
        """``source``'s bytes as entry ``name``, then the entry journaled (synced first)."""
        raw = name.encode()
        offset = self._file.tell()
        fd = open_regular(source)  # never through a link: only files zarrmill wrote are published
        size = os.fstat(fd).st_size
        extra = struct.pack("<HHQQ", ZIP64_EXTRA, 16, size, size)
        self._file.write(LOCAL.pack(0x04034B50, VERSION, UTF8, 0, 0, DOS_DATE, 0, MAX32, MAX32, len(raw), len(extra)))
        self._file.write(raw + extra)
        crc, copied = 0, 0
        with open(fd, "rb") as src:
            while block := src.read(BLOCK):
                crc = zlib.crc32(block, crc)
                self._file.write(block)
                copied += len(block)
        if copied != size:
            raise OSError(f"{source}: changed size while it was packed ({size} -> {copied} bytes)")
        end = self._file.tell()
        self._file.seek(offset + 14)  # the CRC-32 field, known only now
        self._file.write(struct.pack("<I", crc))
        self._file.seek(end)
        entry = Entry(name, offset, size, crc)
        self.entries.append(entry)
        self.names.add(name)
        self._pending.append(entry)
        return entry

    def commit(self) -> list[Entry]:
        """Make the entries added since the last commit durable: the archive synced, then their
        journal lines written and synced. Returns them: only now may their sources go. (One sync
        per batch, not per entry: 600 syncs took seconds on a plate of 300 shards.)"""
        if not self._pending:
            return []
        self._sync()
        self._log.write("".join(f"{e.offset}\t{e.size}\t{e.crc}\t{e.name}\n" for e in self._pending))
        self._log.flush()
        os.fsync(self._log.fileno())
        done, self._pending = self._pending, []
        return done

    def close(self, comment: bytes = b"") -> int:
        """The central directory and end records; returns the archive's size."""
        self.commit()
        start = self._file.tell()
        for e in self.entries:
            raw = e.name.encode()
            big = [v for v in (e.size, e.size, e.offset) if v >= MAX32]
            extra = struct.pack(f"<HH{len(big)}Q", ZIP64_EXTRA, 8 * len(big), *big) if big else b""
            size32 = MAX32 if e.size >= MAX32 else e.size
            self._file.write(CENTRAL.pack(0x02014B50, VERSION, VERSION, UTF8, 0, 0, DOS_DATE, e.crc, size32, size32,
                                          len(raw), len(extra), 0, 0, 0, 0, min(e.offset, MAX32)))
            self._file.write(raw + extra)
        end64 = self._file.tell()
        n, cd_size = len(self.entries), end64 - start
        self._file.write(END64.pack(0x06064B50, END64.size - 12, VERSION, VERSION, 0, 0, n, n, cd_size, start))
        self._file.write(LOCATOR.pack(0x07064B50, 0, end64, 1))
        self._file.write(END.pack(0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), min(cd_size, MAX32),
                                  min(start, MAX32), len(comment)) + comment)
        self._file.truncate()
        self._sync()
        size = self._file.tell()
        self._file.close()
        self._log.close()
        return size

    def abandon(self) -> None:
        """Close the files (a failure): the journal still tells a resume where to go on."""
        self._file.close()
        self._log.close()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())


def _read_journal(journal: Path) -> list[Entry]:
    """Finished entries; a line cut by a kill (no newline) is not one."""
    if not os.path.lexists(journal):
        return []
    with open(open_own_file(journal, os.O_RDWR), "r+", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
        entries = []
        for line in lines[:-1]:
            offset, size, crc, name = line.split("\t", 3)
            entries.append(Entry(name, int(offset), int(size), int(crc)))
        if lines[-1]:  # cut by a kill: dropped, so the next line starts on a line of its own
            fh.seek(0)
            fh.truncate()
            fh.write("".join(line + "\n" for line in lines[:-1]))
    return entries
