"""The few storage operations zarrmill's bookkeeping needs, over a folder or an object-store
prefix, so that the lock, the ledger and the ownership rules are each one algorithm
(runtime/core/locks.py, runtime/core/ledger.py, ownership.py) whichever kind of storage holds them:

- ``create``: create-exclusive, with the whole content (False when the key exists);
- ``read``; ``stat`` (a version token and the age in seconds);
- ``replace``: whole content, optionally only if the version is still the one given;
- ``any_under`` (one listing of one key), ``keys`` (every key under a prefix);
- ``delete``: literal keys only.

Keys are relative, '/'-separated, and never leave the backend's root."""
from __future__ import annotations

from typing import Iterable, Protocol

from .disk_backend import NO_HARD_LINKS, DiskBackend, Version  # noqa: F401 - re-exported
from .kinds import writable_kind
from .location import Location, Where, as_location, key_of
from .object_store import ConditionFailed, delete_keys, get, has_objects, head, keys_under, put
from .paths import checked_key


class Backend(Protocol):
    root: Where

    def create(self, key: str, data: bytes, durable: bool = True) -> bool: ...
    def read(self, key: str) -> bytes | None: ...
    def stat(self, key: str) -> Version | None: ...
    def replace(self, key: str, data: bytes, if_version: str | None = None) -> bool: ...
    def renew(self, key: str, data: bytes, if_version: str) -> bool: ...
    def any_under(self, prefix: str) -> bool: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def delete(self, keys: Iterable[str]) -> None: ...


class ObjectBackend:
    """An object-store prefix: create-only and If-Match PUTs, one-key listings, literal deletes."""

    def __init__(self, root: Location):
        self.root = as_location(str(root).rstrip("/"))

    def path(self, key: str) -> Location:
        return self.root / checked_key(key)

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

    def renew(self, key: str, data: bytes, if_version: str) -> bool:
        """A lease's heartbeat: the lock rewritten whole with its fresh beat, in one PUT with
        ``If-Match: <if_version>``, so a taker's lock written meanwhile is never replaced. False when
        the ETag changed or the object is gone (S3 answers If-Match on a missing key 404)."""
        try:
            put(self.path(key), data, if_match=if_version)
        except (ConditionFailed, FileNotFoundError):
            return False
        return True

    def any_under(self, prefix: str) -> bool:

        return has_objects(self.path(prefix))

    def keys(self, prefix: str = "") -> list[str]:

        base = key_of(self.root) + "/"
        return [k[len(base):] for k in keys_under(self.path(prefix) if prefix else self.root) if k.startswith(base)]

    def delete(self, keys: Iterable[str]) -> None:

        delete_keys(self.root, [key_of(self.path(k)) for k in keys])


def backend_for(root: Where) -> Backend:
    """The bookkeeping backend of the kind of storage ``root`` is in (kinds/)."""
    return writable_kind(root).load("backend")(root)
