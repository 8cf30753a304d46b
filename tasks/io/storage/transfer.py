"""Whole files between zarrmill and wherever a store lives, so callers never ask where that is:
many small files written together, a file built where it can be written in place, a local copy
of a file to memory-map."""
from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from .atomic import atomic_write_bytes
from .location import Location, on_disk

T = TypeVar("T")
NODES_AT_ONCE = 8  # nodes of a bucket written together (each a few dependent requests)


def write_files(root: Location, files: dict[str, bytes]) -> None:
    """``files`` (keys relative to ``root``) written whole: on disk one by one (as zarr's LocalStore,
    without a sync each), on a server as one batch of PUTs in flight together."""
    if on_disk(root) is not None:
        for key, data in files.items():
            atomic_write_bytes(root / key, data, durable=False)
        return
    from .object_store import put_many

    put_many({root / key: data for key, data in files.items()})


def each_node(root: Location, items: Sequence[T], work: Callable[[T], None]) -> None:
    """``work`` on every item (each writes nodes of the store at ``root``): on disk one after
    another; on a server several at once, since each item is a chain of round trips (read, then
    write) and waiting for them in turn left the server idle (4 wells: 1.8 s of 7 s in a bucket)."""
    if on_disk(root) is not None or len(items) < 2:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(min(NODES_AT_ONCE, len(items)), thread_name_prefix="zarrmill-nodes") as pool:
        for _ in pool.map(work, items):  # the first error is raised, once every item has ended
            pass


@contextmanager
def built_locally(path: Location, prefix: str = "zarrmill-") -> Iterator[Path]:
    """A local path to build ``path`` at (for writers that write a file in place): ``path`` itself
    on disk; elsewhere a file in a temporary folder, sent as one object when the block ends
    without an error (a reader never sees half of it)."""
    local = on_disk(path)
    if local is not None:
        yield local
        return
    from .object_store import put_file

    with tempfile.TemporaryDirectory(prefix=prefix) as tmpdir:
        built = Path(tmpdir) / Path(str(path)).name
        yield built
        put_file(path, built)


@contextmanager
def local_copy(path: Location, prefix: str = "zarrmill-") -> Iterator[Path]:
    """``path`` as a local file for the block (to memory-map it): itself on disk, else a copy in a
    temporary folder, removed after."""
    local = on_disk(path)
    if local is not None:
        yield local
        return
    from .object_store import get_file

    with tempfile.TemporaryDirectory(prefix=prefix) as tmpdir:
        copy = Path(tmpdir) / Path(str(path)).name
        get_file(path, copy)
        yield copy
