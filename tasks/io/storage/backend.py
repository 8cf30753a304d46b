"""The few storage operations zarrmill's bookkeeping needs, over a folder or an object-store
prefix, so that the lock, the ledger and the ownership rules are each one algorithm
(runtime/locks.py, runtime/ledger.py, ownership.py) whichever kind of storage holds them:

- ``create``: create-exclusive, with the whole content (False when the key exists);
- ``read``; ``stat`` (a version token and the age in seconds);
- ``replace``: whole content, optionally only if the version is still the one given;
- ``any_under`` (one listing of one key), ``keys`` (every key under a prefix);
- ``delete``: literal keys only.

Keys are relative, '/'-separated, and never leave the backend's root."""
from __future__ import annotations

import errno
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol

from ...errors import UnsafeOutputError
from .atomic import atomic_write_bytes
from .location import Location, as_location, is_remote, key_of
from .object_store import ConditionFailed, delete_keys, get, has_objects, head, keys_under, put
from .paths import remove_bookkeeping

# what link(2) answers on file systems without hard links (FAT/exFAT, s3fs-fuse, rclone, some FUSE)
NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS, errno.EXDEV, errno.EACCES}


@dataclass(frozen=True)
class Version:
    token: str  # changes whenever the content is replaced
    age: float  # seconds since the last write


class Backend(Protocol):
    root: Any

    def create(self, key: str, data: bytes, durable: bool = True) -> bool: ...
    def read(self, key: str) -> bytes | None: ...
    def stat(self, key: str) -> Version | None: ...
    def replace(self, key: str, data: bytes, if_version: str | None = None) -> bool: ...
    def renew(self, key: str, data: bytes, if_version: str) -> bool: ...
    def any_under(self, prefix: str) -> bool: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def delete(self, keys: Iterable[str]) -> None: ...


def _checked(key: str) -> str:
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeOutputError(f"{key}: a bookkeeping key must stay inside its folder")
    return key


class DiskBackend:
    """A local (or network) folder. Create-exclusive is a hard link of a fully written temp file
    (atomic on local file systems and NFS); where links are refused, an ``O_EXCL`` create written in
    the same breath, removed again if the write fails."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self._links = True

    def path(self, key: str) -> Path:
        return self.root / _checked(key)

    def create(self, key: str, data: bytes, durable: bool = True) -> bool:
        """``durable=False`` skips the fsync (ledger records, which a node crash may lose: their
        units are redone; an fsync also flushes every chunk the units just wrote)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._links:
            tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
            _write_synced(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644), data, tmp, durable)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            except OSError as err:
                if err.errno not in NO_HARD_LINKS:
                    raise
                self._links = False  # this file system has no hard links: create-exclusive below
            finally:
                tmp.unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        _write_synced(fd, data, path, durable)
        return True

    def read(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stat(self, key: str) -> Version | None:
        try:
            st = os.stat(self.path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Version(f"{st.st_mtime_ns}-{st.st_size}", time.time() - st.st_mtime)

    def replace(self, key: str, data: bytes, if_version: str | None = None) -> bool:
        """Whole content through a rename; ``if_version``: only if unchanged since that version
        (checked just before the rename: disks have no conditional rename)."""

        if if_version is not None:
            now = self.stat(key)
            if now is None or now.token != if_version:
                return False
        atomic_write_bytes(self.path(key), data)
        return True

    def renew(self, key: str, data: bytes, if_version: str) -> bool:
        """A lease's heartbeat: its modification time, if it is still that version. The content is
        never rewritten on disk: a check-then-rename could replace another run's lock created in
        between; a touch at worst freshens it."""
        now = self.stat(key)
        if now is None or now.token != if_version:
            return False
        os.utime(self.path(key))
        return True

    def any_under(self, prefix: str) -> bool:
        try:
            return bool(os.listdir(self.path(prefix)))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def keys(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else self.root
        out = []
        for dirpath, _, names in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            out += [n if rel == "." else f"{rel}/{n}".replace(os.sep, "/") for n in names if not n.endswith(".partial")]
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        """Bookkeeping files only: each goes through the guard's ``remove_bookkeeping``."""

        for key in keys:
            remove_bookkeeping(self.path(key))


def _write_synced(fd: int, data: bytes, path: Path, durable: bool = True) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except BaseException as err:
        os.close(fd)
        path.unlink(missing_ok=True)  # never an empty or half-written file left under that name
        if type(err) is OSError and err.filename is None:  # write() and fsync() name no file (a full disk)
            err.filename = str(path)
        raise
    os.close(fd)


class ObjectBackend:
    """An object-store prefix: create-only and If-Match PUTs, one-key listings, literal deletes."""

    def __init__(self, root: Location):
        self.root = as_location(str(root).rstrip("/"))

    def path(self, key: str) -> Location:
        return self.root / _checked(key)

    def create(self, key: str, data: bytes, durable: bool = True) -> bool:

        try:
            put(self.path(key), data, create_only=True)
        except ConditionFailed:
            return False
        return True

    def read(self, key: str) -> bytes | None:

        return get(self.path(key))

    def stat(self, key: str) -> Version | None:

        info = head(self.path(key))
        return None if info is None else Version(info["etag"], info["age"])

    def replace(self, key: str, data: bytes, if_version: str | None = None) -> bool:

        try:
            put(self.path(key), data, if_match=if_version)
        except ConditionFailed:
            return False
        return True

    def any_under(self, prefix: str) -> bool:

        return has_objects(self.path(prefix))

    def keys(self, prefix: str = "") -> list[str]:

        base = key_of(self.root) + "/"
        return [k[len(base):] for k in keys_under(self.path(prefix) if prefix else self.root) if k.startswith(base)]

    def delete(self, keys: Iterable[str]) -> None:

        delete_keys(self.root, [key_of(self.path(k)) for k in keys])


def backend_for(root: Any) -> DiskBackend | ObjectBackend:
    return ObjectBackend(root) if is_remote(root) else DiskBackend(root)
