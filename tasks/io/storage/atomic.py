"""Atomic file writes: write ``<path>.<uuid>.partial`` then rename, so a reader (or a rerun after a
crash) sees either the old file or the new one, never half of one."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from .guard_fs import discard_temp, remove_entry, replace_entry, replace_file
from .handles import open_in_store
from .location import JsonValue, Where
from .ozx_path import OzxPath, is_virtual


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> None:
    """``durable=False`` skips the fsync: chunk files, whose unit is rewritten if not recorded
    as done, and where an fsync per chunk also flushed every other freshly written chunk. In a
    bucket, one PUT of the whole object (atomic by nature: readers see the old or the new one)."""
    if is_virtual(path):
        path.write_bytes(data)  # a bucket (an archive has no write_bytes: it is never written)
        return
    path = Path(path)
    folder = open_in_store(path.parent, create=True)  # below a store being written: through its handle
    if folder is not None:
        _write_below(folder, path, data, durable)
        return
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        fh = open(tmp, "wb")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(tmp, "wb")
    try:
        with fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        replace_file(tmp, path)
    except BaseException as err:
        discard_temp(tmp)
        if type(err).__module__ == "builtins" and isinstance(err, OSError) and err.filename is None:
            # write() and fsync() name no file (a full disk, a quota)
            err.filename = str(path)
        raise


def _write_below(folder: int, path: Path, data: bytes, durable: bool) -> None:
    """``atomic_write_bytes`` into the folder handle ``folder`` (closed here): the temp file made
    new, never through a link, renamed over ``path``'s name in the same folder."""
    tmp = f"{path.name}.{uuid.uuid4().hex}.partial"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
        try:
            with open(out, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            replace_entry(folder, tmp, path.name)
        except BaseException as err:
            try:
                remove_entry(folder, tmp, tree=False)  # the temp file this call made, by its new name
            except OSError:
                pass
            if type(err).__module__ == "builtins" and isinstance(err, OSError) and err.filename is None:
                err.filename = str(path)
            raise
    finally:
        os.close(folder)


def canonical_json(obj: JsonValue) -> str:
    """Deterministic JSON (sorted keys, fixed indent) so reruns write identical bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"


def atomic_write_json(path: str | os.PathLike[str], obj: JsonValue) -> None:
    atomic_write_bytes(path, canonical_json(obj).encode())


def read_json_if_exists(path: Where) -> JsonValue:
    """``read_json(path)``, or None when there is no such file; in a bucket one GET either way
    (an existence check first would be a second request per metadata file)."""
    if isinstance(path, OzxPath):
        return read_json(path) if path.is_file() else None
    if type(path).__module__.startswith("upath"):
        try:
            from .location import key_of

            data = path.fs.cat_file(key_of(path))  # one GET (read_bytes asks the size first)
        except FileNotFoundError:
            return None
        return _parse_json(path, data)
    return read_json(path) if os.path.exists(path) else None


def read_json(path: str | os.PathLike[str]) -> JsonValue:
    """A JSON file; a damaged one (truncated, binary, hand-edited) is one error naming the file and
    where it breaks."""
    from ...errors import InputError

    try:
        if is_virtual(path):  # a remote location, or inside an .ozx
            data = path.read_bytes()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except PermissionError:
        raise InputError(f"{path}: permission denied; zarrmill needs to read it") from None
    return _parse_json(path, data)


def _parse_json(path: Where, data: bytes) -> JsonValue:
    from ...errors import InputError

    try:
        return json.loads(data)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON at line {err.lineno} column {err.colno} ({err.msg}); "
                         "the file is damaged or was not written completely") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (UTF-8) JSON file") from None
