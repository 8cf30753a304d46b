"""An array's folder as an open handle, so its pixels land in it whatever happens to its path.

tensorstore writes chunks by path (its file kvstore opens, creates folders and renames by name),
so a path judged once and written later followed whatever stood there by then: a colleague who
swapped a folder of the store for a link between zarrmill's check and its writes received them.
Here the array's folder is opened once per process, from the store's root (the top folder of the
zarr hierarchy that holds it), without following a link at the root or below it, and tensorstore
is given ``/proc/self/fd/N``: the kernel resolves that to the folder the handle holds, wherever it
has been renamed since, and a link put in the place of the root or of any folder between root and
array is never followed. Below the array's folder every folder is zarrmill's, created without group
or other write (permissions.py), so nobody else can swap one there.

Where ``/proc/self/fd`` does not exist (not Linux), the path is used as before."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import ContextManager, Iterator

from ...errors import UnsafeOutputError, ZarrmillError
from . import guard_fs

PROC_FD = Path("/proc/self/fd")


class StoreChangedError(ZarrmillError):
    """A folder of the store was replaced (by a link or another file) while the run wrote it."""


def by_handle() -> bool:
    return PROC_FD.is_dir()


def _is_node(folder: Path) -> bool:
    return any(os.path.lexists(folder / name) for name in ("zarr.json", ".zgroup", ".zarray"))


def store_root_of(array_folder: Path) -> Path:
    """The top folder of the zarr hierarchy holding ``array_folder`` (links above it are the
    user's own path to it and are followed; from there down, none is)."""
    root = array_folder
    while root.parent != root and _is_node(root.parent):
        root = root.parent
    return root


# The stores this process writes now: absolute root path -> [the root's (device, inode) as the
# output guard judged it in this process (None in a worker: judged there by not following a link),
# how many steps and units write it now].
_ROOTS: dict[str, list] = {}
_ROOTS_LOCK = threading.Lock()


@contextmanager
def writing_into(root: str | os.PathLike[str], identity: tuple[int, int] | None = None) -> Iterator[None]:
    """While inside (a step, a unit; nested and in threads alike): every write below ``root`` in
    this process goes through a handle of it (``open_in_store``, tensorstore's arrays)."""
    key = os.path.abspath(root)
    with _ROOTS_LOCK:
        entry = _ROOTS.setdefault(key, [identity, 0])
        entry[0] = entry[0] or identity
        entry[1] += 1
    try:
        yield
    finally:
        with _ROOTS_LOCK:
            entry[1] -= 1
            if entry[1] <= 0 and _ROOTS.get(key) is entry:
                del _ROOTS[key]


def writing_below(root: object, identity: tuple[int, int] | None = None) -> ContextManager[None]:
    """``writing_into`` for a store on this machine's disks; nothing for a bucket."""
    from .location import on_disk
    from .ozx_path import OzxPath

    local = on_disk(root)  # type: ignore[arg-type]
    return writing_into(local, identity) if local is not None and not isinstance(local, OzxPath) else nullcontext()


def root_for(path: str | os.PathLike[str]) -> tuple[str, tuple[int, int] | None] | None:
    """The registered store holding ``path`` (the innermost), with its judged identity."""
    text = os.path.abspath(path)
    with _ROOTS_LOCK:
        found = [(root, entry[0]) for root, entry in _ROOTS.items() if text == root or text.startswith(root + os.sep)]
    return max(found, key=lambda r: len(r[0])) if found else None


def open_in_store(folder: str | os.PathLike[str], create: bool = False) -> int | None:
    """A handle of ``folder`` reached from the registered store root holding it, without following
    a link at the root or below it (made where missing when ``create``); None when no registered
    store holds it. A folder on that way replaced by a link or a file is one line naming it."""
    found = root_for(folder)
    if found is None:
        return None
    root, identity = found
    parts = list(Path(os.path.abspath(folder)).relative_to(root).parts)
    try:
        root_fd = guard_fs.open_judged(root, identity)
        try:
            return guard_fs.open_below(root_fd, parts, create)
        finally:
            os.close(root_fd)
    except (UnsafeOutputError, NotADirectoryError) as err:
        raise StoreChangedError(f"{folder}: the store was changed during the run: a folder on the way to it was "
                                f"replaced ({err}); nothing was written through it. Undo the change and "
                                "rerun") from None


def open_array_folder(array_folder: str) -> int:
    """A handle of the array's folder: from the registered store holding it, else from the top of
    its zarr hierarchy (store_root_of), in both cases without following a link from there down."""
    fd = open_in_store(array_folder)
    if fd is not None:
        return fd
    folder = Path(array_folder)
    root = store_root_of(folder)
    with writing_into(root):
        fd = open_in_store(folder)
    assert fd is not None
    return fd


def handle_path(fd: int) -> str:
    """The path tensorstore is given for the folder ``fd`` holds."""
    return str(PROC_FD / str(fd))


class HeldFolder:
    """A tensorstore opened on a folder handle, holding the handle for as long as it lives."""

    def __init__(self, store: object, fd: int | None):
        self.store, self.fd = store, fd

    def __getitem__(self, index: object) -> object:
        return self.store[index]  # type: ignore[index]

    def __del__(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
