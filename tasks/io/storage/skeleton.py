"""An output's skeleton (its groups and empty arrays) written from metadata documents made once
per distinct array: a plate's wells share a handful of array layouts, and zarr-python spends ~3 ms
making and writing each array's metadata (its event loop, store checks), which for the 14,000
nodes of a 1536-well plate was most of a minute. Here zarr-python makes each layout's documents
once, in memory; every node then gets them in one small write. A resumed run recognises its own
arrays by the same documents, byte for byte, without opening them through zarr.

Local folders only: buckets keep zarr-python's own path (its requests are counted and tuned)."""
from __future__ import annotations

import json
from pathlib import Path

import zarr
from zarr.storage import MemoryStore

from .atomic import atomic_write_bytes

_DOCUMENTS: dict[str, dict[str, bytes]] = {}


def _key(kwargs: dict[str, object]) -> str:
    return repr(sorted((k, repr(v)) for k, v in kwargs.items()))


def array_documents(kwargs: dict[str, object]) -> dict[str, bytes]:
    """The metadata files zarr-python writes for ``zarr.create_array(**kwargs)``, by name."""
    key = _key(kwargs)
    docs = _DOCUMENTS.get(key)
    if docs is None:
        store: dict[str, object] = {}
        zarr.create_array(MemoryStore(store), **kwargs)
        docs = _DOCUMENTS[key] = {name: buf.to_bytes() for name, buf in store.items()}
    return docs


def write_array(path: Path, kwargs: dict[str, object]) -> None:
    """Create the (empty) array at ``path``: what ``zarr.create_array(path, **kwargs)`` writes."""
    for name, data in array_documents(kwargs).items():  # its folders made as the file is (atomic.py)
        atomic_write_bytes(path / name, data, durable=False)  # as zarr's own store: no fsync


def is_array_as_made(path: Path, kwargs: dict[str, object]) -> bool:
    """``path`` holds exactly the array ``write_array`` makes with ``kwargs`` (False: it may still
    be an equivalent one; ask zarr)."""
    for name, data in array_documents(kwargs).items():
        try:
            if (path / name).read_bytes() != data:
                return False
        except OSError:
            return False
    return True


def group_document(zarr_format: int) -> dict[str, bytes]:
    if zarr_format == 3:
        return {"zarr.json": json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}, indent=2).encode()}
    return {".zgroup": json.dumps({"zarr_format": 2}, indent=2).encode()}


def write_group_if_absent(path: Path, zarr_format: int) -> bool:
    """Create a group at ``path`` where no zarr metadata is; True when the group is there now.
    False: some other node is there (zarr says what, opening it)."""
    name, data = next(iter(group_document(zarr_format).items()))
    there = [n for n in ("zarr.json", ".zgroup", ".zarray") if (path / n).is_file()]
    if there:
        if there != [name]:
            return False
        try:
            return json.loads((path / name).read_bytes()).get("node_type", "group") == "group"
        except (OSError, ValueError):
            return False
    atomic_write_bytes(path / name, data, durable=False)  # its folders made as the file is (atomic.py)
    return True
