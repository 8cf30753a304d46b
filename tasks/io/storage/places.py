"""Where a store lives, as the output guard (guard.py) needs to know it: a folder on disk
(place_disk.py) or a prefix in a bucket (place_bucket.py). Each place answers the same questions
(is the root writable at all, does it overlap an input, what is under a node, is a path inside the
root, is a node there) and does the same few things (make folders, groups and arrays, delete a node,
roll back what a run made) through the protocol below; the guard's rules and arrays.py's
ensure_group/ensure_array are written once, over either. Each place holds its two key-value
backends (backend.py): ``meta`` (the bookkeeping beside the store: owner, lock, ledger) and
``store`` (the store itself), so ownership, locks and the ledger are one algorithm too."""
from __future__ import annotations

from typing import ClassVar, Iterable, Protocol

from ...errors import ConfigError
from .backend import Backend
from .kinds import kind_of
from .kinds.base import StorageKind
from .location import Location, Where


class Place(Protocol):
    noun: ClassVar[str]  # "path" or "prefix", for messages
    FOREIGN: ClassVar[str]  # why a store zarrmill did not create is refused, and the fix
    root: Location
    bookkeeping: Location
    meta: Backend
    store: Backend
    # lookups cost nothing (a file system): a node's absence is looked up, not inferred from the
    # run's records (a bucket's LIST is a request: guard.known_absent answers instead)
    cheap_lookups: ClassVar[bool]

    def check_root(self, in_place: bool) -> None: ...
    def overlaps(self) -> list[tuple[Location, bool, bool, bool]]: ...
    def has_content(self) -> bool: ...
    def entries(self, node: Where) -> list[Location]: ...
    def is_empty(self, node: Where) -> bool: ...
    def exists(self, node: Where) -> bool: ...
    def node_there(self, node: Where) -> bool: ...
    def make_dirs(self, path: Where) -> list: ...
    def make_group(self, path: Location, zarr_format: int) -> None: ...
    def make_array(self, path: Location, kwargs: dict[str, object]) -> None: ...
    def is_array_as_made(self, path: Location, kwargs: dict[str, object]) -> bool: ...
    def contain(self, path: Where, what: str) -> Location: ...
    def within(self, path: Where) -> Location | None: ...
    def rel(self, path: Where) -> str: ...
    def never_delete(self, path: Where) -> None: ...
    def delete(self, path: Where) -> None: ...
    def discard(self, path: Where, kind: str) -> None: ...
    def discard_folder(self, path: Where, quiet: bool = False) -> None: ...
    def prepare(self) -> list: ...


def bookkeeping_of(root: Where) -> Location:
    """Where zarrmill keeps a store's bookkeeping: ``.<name>.zarrmill`` beside it, in its folder or
    its bucket prefix."""
    return _writable_kind(root).load("bookkeeping")(root)


def place_of(root: Where, inputs: Iterable[Where] = ()) -> Place:
    return _writable_kind(root).load("place")(root, inputs)


def _writable_kind(root: Where) -> StorageKind:
    kind = kind_of(root)
    if not kind.writable:
        raise ConfigError(f"{root}: zarrmill only reads a {kind.name}; write to a local path or a kind it writes")
    return kind
