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


class _Store:
    """A store this process writes now (module doc)."""

    def __init__(self, real: str, identity: tuple[int, int] | None, carries: str | None):
        self.real = real  # the folder to open: the root's real path (the user's own links above it resolved)
        self.identity = identity  # (device, inode) as the output guard judged it in this process
        self.carries = carries  # the owner id the store must carry (a worker's check, by content)
        self.count = 0  # steps and units writing it now
        self.fd: int | None = None  # the root's handle, held for zarr-python's writes (writable_url)

    def open_root(self) -> int:
        """A new handle of the root: never through a link at its name, only while it is the folder
        the guard judged (in the driver) and carries this run's owner id (in a worker)."""
        fd = guard_fs.open_judged(self.real, self.identity)
        if self.carries is None:
            return fd
        st = os.fstat(fd)
        seen = (self.real, self.carries)
        # device and inode only tell, within this process and mount, whether this is still the
        # folder whose content was read before (as open_judged does); that content, the owner id it
        # carries, is what makes it the run's store, on every node
        if _CHECKED.get(seen) == (st.st_dev, st.st_ino):
            return fd
        if self.carries not in carried_ids(fd):
            os.close(fd)
            raise UnsafeOutputError(f"{self.real}: is no longer the store this run writes (it does not carry its "
                                    "owner id)")
        _CHECKED[seen] = (st.st_dev, st.st_ino)
        return fd


_ROOTS: dict[str, _Store] = {}  # absolute root path as the run names it -> the store
# (real root, owner id) -> (device, inode) of the folder found carrying that id, in this process
_CHECKED: dict[tuple[str, str | None], tuple[int, int]] = {}
_ROOTS_LOCK = threading.Lock()


def carried_ids(fd: int) -> set[str]:
    """The owner ids the store held by ``fd`` carries: in its claim, or in its provenance."""
    import json

    from .ownership import provenance_owner
    from .paths import CLAIM_FILE

    ids: set[str] = set()
    try:
        claim = os.open(CLAIM_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        with open(claim, "rb") as fh:
            doc = json.loads(fh.read() or b"{}")
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            ids.add(doc["id"])
    except (OSError, ValueError):
        pass
    owner = provenance_owner(Path(handle_path(fd))) if by_handle() else None
    if owner is not None:
        ids.add(owner)
    return ids


@contextmanager
def writing_into(root: str | os.PathLike[str], identity: tuple[int, int] | None = None,
                 real: str | os.PathLike[str] | None = None, carries: str | None = None) -> Iterator[None]:
    """While inside (a step, a unit; nested and in threads alike): every write below ``root`` in
    this process goes through a handle of it (``open_in_store``, ``writable_url``, tensorstore's
    arrays). ``real``: the root's real path as judged (else resolved now); ``carries``: the owner
    id it must carry (a worker, told by the driver)."""
    key = os.path.abspath(root)
    with _ROOTS_LOCK:
        store = _ROOTS.get(key)
        if store is None:
            store = _ROOTS[key] = _Store(os.path.realpath(real if real is not None else key), identity, carries)
        store.identity = store.identity or identity
        store.carries = store.carries or carries
        store.count += 1
    try:
        yield
    finally:
        with _ROOTS_LOCK:
            store.count -= 1
            if store.count <= 0 and _ROOTS.get(key) is store:
                del _ROOTS[key]
                if store.fd is not None:
                    os.close(store.fd)


def claimed(root: object, owner_id: str | None) -> None:
    """The run claimed ``root`` (its owner id is what the store carries from now on); nothing for
    a store no run of this process writes below a handle (a bucket's)."""
    if not isinstance(root, (str, os.PathLike)) or "://" in str(root):
        return
    with _ROOTS_LOCK:
        store = _ROOTS.get(os.path.abspath(root))
        if store is not None and owner_id is not None:
            store.carries = owner_id


def _changed(where: object, err: BaseException) -> StoreChangedError:
    return StoreChangedError(f"{where}: the store was changed during the run: a folder on the way to it was "
                             f"replaced ({err}); nothing was written through it. Undo the change and rerun")


def writable_url(path: str | os.PathLike[str]) -> str:
    """Where zarr-python is to open ``path`` to write it (a group's attributes, a small array):
    below a store being written, ``/proc/self/fd/N/<path in the store>`` through the root's
    handle, held while the store is written (a rename of the store, or a link put at its name,
    redirects nothing; below the root nobody else may rename, permissions.py); else its URL. The
    URL is for use at once, inside that scope: the handle is closed when the store's last step or
    unit ends."""
    from .location import zarr_url

    found = root_for(path) if by_handle() else None
    if found is None:
        return zarr_url(path)  # type: ignore[arg-type]  # a bucket's node, or a store no run writes
    key, store = found
    if store.fd is None:
        try:
            opened = store.open_root()  # outside the lock: it may read the store's claim and provenance
        except (UnsafeOutputError, NotADirectoryError) as err:
            raise _changed(key, err) from None
        with _ROOTS_LOCK:
            if store.fd is None and _ROOTS.get(key) is store:
                store.fd = opened
                opened = -1
        if opened != -1:
            os.close(opened)  # another thread's handle was kept (or the store's scope ended)
    fd = store.fd
    if fd is None:
        return zarr_url(path)  # type: ignore[arg-type]  # its scope ended meanwhile: no store is written
    rel = Path(os.path.abspath(path)).relative_to(key)
    return str(PROC_FD / str(fd) / rel) if rel.parts else str(PROC_FD / str(fd))


def writing_below(root: object, identity: tuple[int, int] | None = None, real: object = None,
                  carries: str | None = None) -> ContextManager[None]:
    """``writing_into`` for a store on this machine's disks; nothing for a bucket."""
    from .location import on_disk
    from .ozx_path import OzxPath

    local = on_disk(root)  # type: ignore[arg-type]
    if local is None or isinstance(local, OzxPath):
        return nullcontext()
    return writing_into(local, identity, real, carries)  # type: ignore[arg-type]


def root_for(path: object) -> tuple[str, _Store] | None:
    """The registered store holding ``path`` (the innermost): its root as the run names it; None
    for a path no store being written holds (a bucket's key included)."""
    if not isinstance(path, (str, os.PathLike)) or "://" in str(path):
        return None
    text = os.path.abspath(path)
    with _ROOTS_LOCK:
        found = [(root, store) for root, store in _ROOTS.items() if text == root or text.startswith(root + os.sep)]
    return max(found, key=lambda r: len(r[0])) if found else None


def open_in_store(folder: str | os.PathLike[str], create: bool = False) -> int | None:
    """A handle of ``folder`` reached from the registered store root holding it, without following
    a link at the root or below it (made where missing when ``create``); None when no registered
    store holds it. A folder on that way replaced by a link or a file is one line naming it."""
    found = root_for(folder)
    if found is None:
        return None
    key, store = found
    parts = list(Path(os.path.abspath(folder)).relative_to(key).parts)
    try:
        root_fd = store.open_root()
        try:
            return guard_fs.open_below(root_fd, parts, create)
        finally:
            os.close(root_fd)
    except (UnsafeOutputError, NotADirectoryError) as err:
        raise _changed(folder, err) from None


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
