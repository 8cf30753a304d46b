"""RFC-9's rules for a zipped OME-Zarr, checked on the archive's own records (not through
``zipfile``'s reading of them): the root ``zarr.json`` is the first entry in the file and in the
central directory, the other ``zarr.json`` follow in breadth-first order, entries are stored (no
zip compression), the archive is ZIP64 (end of central directory record and locator present), it
is one part, and a comment, if there is one, is NUL-terminated JSON naming ``ome > version``."""
from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

END64_LOCATOR = b"PK\x06\x07"
LOCAL = b"PK\x03\x04"


def ozx_problems(archive: Path) -> list[str]:
    where = str(archive)
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as err:
        return [f"{where}: not a readable zip archive ({err})"]
    with zf:
        infos = zf.infolist()
        comment = zf.comment
    out: list[str] = []
    if not infos or infos[0].filename != "zarr.json":
        out.append(f"{where}: the root zarr.json is not the first entry of the central directory (RFC-9)")
    metadata = [i.filename for i in infos if i.filename.rsplit("/", 1)[-1] == "zarr.json"]
    lead = [i.filename for i in infos[:len(metadata)]]
    if lead != sorted(metadata, key=lambda n: (n.count("/"), n)) or set(lead) != set(metadata):
        out.append(f"{where}: the zarr.json entries do not come first in breadth-first order (RFC-9)")
    if infos and min(infos, key=lambda i: i.header_offset).filename != "zarr.json":
        out.append(f"{where}: the root zarr.json is not the first file in the archive (RFC-9)")
    compressed = [i.filename for i in infos if i.compress_type != zipfile.ZIP_STORED]
    if compressed:
        out.append(f"{where}: {len(compressed)} entries are zip-compressed (e.g. {compressed[0]}); RFC-9 "
                   "recommends stored entries")
    with open(archive, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - (1 << 16) - 64))
        tail = fh.read()
        fh.seek(0)
        head = fh.read(4)
    if END64_LOCATOR not in tail:
        out.append(f"{where}: not a ZIP64 archive (no ZIP64 end of central directory locator)")
    else:
        at = tail.rfind(END64_LOCATOR)
        disks = struct.unpack("<I", tail[at + 16:at + 20])[0]
        if disks != 1:
            out.append(f"{where}: a multi-part archive ({disks} parts); RFC-9 allows one")
    if head != LOCAL:
        out.append(f"{where}: does not start with an entry (data before the first local header)")
    if comment:
        out += _comment_problems(where, comment)
    return out


def _comment_problems(where: str, comment: bytes) -> list[str]:
    if not comment.endswith(b"\0"):
        return [f"{where}: the archive comment is not NUL-terminated (RFC-9)"]
    try:
        doc = json.loads(comment[:-1].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return [f"{where}: the archive comment is not UTF-8 JSON (RFC-9)"]
    version = doc.get("ome", {}).get("version") if isinstance(doc, dict) and isinstance(doc.get("ome"), dict) else None
    if not isinstance(version, str):
        return [f"{where}: the archive comment has no ome > version (RFC-9)"]
    return []
