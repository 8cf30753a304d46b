"""Input fingerprints: what a step read, so a rerun notices inputs that changed since.

Every file under each input (zarrmill's bookkeeping folders left out) is recorded by size and
modification time in nanoseconds, plus a SHA-256 of its content when it is a small metadata file
(an mlf, a zarr.json, a CSV of points), which catches an edit within the file system's timestamp
resolution. Large pixel files are judged by size and mtime, as make and rsync do: a re-export
rewrites them and so changes their mtime. A folder holding more than ``LISTED_UP_TO`` files (a
plate's images) is one entry for its pixel files: their count, bytes and a digest of every name,
size and mtime, so a changed, added or removed image still changes the fingerprint."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

from .ozx_path import OzxPath
from .paths import is_bookkeeping_name
from .location import is_remote, location_key, on_disk

HASH_UP_TO = 64 * 1024
# a folder with more files than this is recorded as one entry for its pixel files (count, bytes and
# a digest of every name, size and mtime), its metadata files still one by one: a full plate's
# 2.76 M images made a fingerprint of ~700 MB in the driver and a ledger record of ~150 MB
LISTED_UP_TO = 10_000
# hashed: metadata (small, edited by hand or rewritten in place); not chunks and pixels, which a
# large zarr input holds by the hundred thousand (reading them all would make every rerun slow)
METADATA_SUFFIXES = {".json", ".zattrs", ".zarray", ".zgroup", ".mlf", ".mrf", ".mes", ".htd", ".csv",
                     ".tsv", ".txt", ".xml", ".yaml", ".yml"}
Fingerprint = dict[str, list]


def _entry(path: str, st: os.stat_result) -> list:
    entry: list = [st.st_size, st.st_mtime_ns]
    if st.st_size <= HASH_UP_TO and _is_metadata(path):
        try:
            with open(path, "rb") as fh:
                entry.append(hashlib.sha256(fh.read()).hexdigest()[:16])
        except OSError:
            entry.append(None)
    return entry


def _is_metadata(path: str) -> bool:
    name = os.path.basename(path).lower()
    return os.path.splitext(name)[1] in METADATA_SUFFIXES or name in METADATA_SUFFIXES


def fingerprint(inputs: Iterable[str | os.PathLike[str]], skip: Iterable[str | os.PathLike[str]] = ()) -> Fingerprint:
    """{file path: [size, mtime_ns, (hash)]} of every file under ``inputs``, named from the input's
    own folder name down (``plate.zarr/B/03/zarr.json``), so the same input reached through
    another mount or path has the same fingerprint; inputs in ``skip`` (a store the step itself
    writes into) are left out."""
    skipped = {location_key(on_disk(s) or s) for s in skip}
    out: Fingerprint = {}
    for inp in inputs:
        inp = on_disk(inp) or inp  # a local kind's URL: its files, by path (mtimes, not listings)
        if is_remote(inp):
            if location_key(inp) not in skipped:
                out.update(_remote_fingerprint(inp))
            continue
        if isinstance(inp, OzxPath):  # inside a zipped OME-Zarr: the archive is one file, rewritten whole
            out[f"{inp.archive.name}:{inp.inner}"] = _entry(str(inp.archive), os.stat(inp.archive))
            continue
        top = os.path.abspath(inp)
        if top in skipped or not os.path.exists(top):
            continue
        if os.path.isfile(top):
            out[os.path.basename(top)] = _entry(top, os.stat(top))
            continue
        base = os.path.dirname(top)
        for dirpath, dirnames, names in os.walk(top, followlinks=True):
            dirnames[:] = sorted(d for d in dirnames if d != ".zarrmill" and not is_bookkeeping_name(d))
            many = len(names) > LISTED_UP_TO
            digest, count, size = hashlib.sha256(), 0, 0
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if many and not _is_metadata(path):
                    digest.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
                    count, size = count + 1, size + st.st_size
                    continue
                out[os.path.relpath(path, base)] = _entry(path, st)
            if count:  # a folder of a plate's images: one entry, not one per file
                out[os.path.join(os.path.relpath(dirpath, base), "*")] = [count, size, digest.hexdigest()[:16]]
    return out


def _remote_fingerprint(top) -> Fingerprint:
    """{url: [size, ETag]} of every object under a remote input: an object rewritten in place gets
    a new ETag (S3's content hash for a single PUT)."""
    from .location import key_of, traits_of

    if not traits_of(top).lists:
        from ...errors import warn

        warn(top, "a web server lists no files: this input is not fingerprinted, so a rerun does not notice "
                  "it changed (use --overwrite after it did)")
        return {}
    fs = top.fs
    try:
        found = fs.find(key_of(top), detail=True)
    except FileNotFoundError:
        return {}
    base = key_of(top).rsplit("/", 1)[0] + "/" if "/" in key_of(top) else ""
    return {key[len(base):]: [info.get("size"), str(info.get("ETag") or info.get("etag") or "")]
            for key, info in sorted(found.items())
            if not any(is_bookkeeping_name(part) for part in key.split("/"))}


def changed_files(old: Fingerprint, new: Fingerprint) -> list[str]:
    """Files added, removed or different between two fingerprints, sorted."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def describe_changes(files: list[str], shown: int = 3) -> str:
    names = ", ".join(f"files in {Path(f).parent.name}/" if Path(f).name == "*" else Path(f).name
                      for f in files[:shown])
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return f"{len(files)} file{'s' if len(files) != 1 else ''} ({names}{more})"
