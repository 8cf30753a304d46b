"""A folder of this machine (or a shared file system mounted on it): local paths, and a node inside
an ``.ozx`` archive on one (read only)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..ozx_path import split_ozx
from .base import DISK, StorageKind

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.storage import StorePath


class Disk(StorageKind):
    name, schemes, traits, rank = "disk", (), DISK, 0
    place, backend, bookkeeping = ".place_disk:DiskPlace", ".disk_backend:DiskBackend", ".paths:bookkeeping_dir"

    def local_path(self, text: str) -> Path:
        return Path(text)

    def zarr_path(self, scheme: str | None, rest: str) -> str | StorePath:
        """The path itself; a node inside an ``.ozx``: zarr-python's ``ZipStore`` over the archive."""
        inside = split_ozx(rest)
        return _zip_store_path(*inside) if inside else rest


def _zip_store_path(archive: Path, inner: str) -> StorePath:
    """A node inside an ``.ozx``, read only (one store per archive and process, opened again when
    the archive was rewritten)."""
    import asyncio

    import zarr.storage

    st = archive.stat()
    key = (str(archive), st.st_mtime_ns, st.st_size)
    if key not in _ZIP_STORES:  # opened here: zarr opens a store only when it makes the StorePath itself
        _ZIP_STORES[key] = asyncio.run(zarr.storage.ZipStore.open(archive, mode="r"))
    return zarr.storage.StorePath(_ZIP_STORES[key], inner)


_ZIP_STORES: dict[tuple[str, int, int], Store] = {}

KIND = Disk()
