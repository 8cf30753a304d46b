"""``PatchDataset``: read a patch store (what ``patch-extract`` writes) as a map-style dataset. Each item is
one patch as numpy (C, Z, Y, X) costing about one chunk decode. Safe in torch DataLoader worker
processes without torch being a dependency: the zarr handle is opened lazily in each process.
Items are float32 by default (``dtype``), contiguous and writable: torch has no uint16 tensors for
most operations, and ``torch.from_numpy``/``pin_memory`` want writable, contiguous arrays;
``dtype=None`` keeps the stored type."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..storage.chunk_read import read_chunk
from ..storage.location import as_location, zarr_url


class PatchDataset:
    """A patch store as a map-style dataset (``len(ds)``, ``ds[i]``), for a PyTorch ``DataLoader`` or
    any loop: ``ds[i]`` is patch i as numpy (C, Z, Y, X) or (C, Y, X), float32 unless ``dtype`` says
    otherwise (``dtype=None``: the stored type), contiguous and writable, read with about one chunk
    decode. Safe in DataLoader worker processes without torch being a dependency: the zarr handle is
    opened lazily in each process.

    ``store``: a complete patch store (a local path or ``s3://``); a store whose run has not
    finished is refused (``ValueError``). ``include_dropped``: also list the points that were
    dropped (NaN, outside the image, crossing the edge), whose patches are zeros. Attributes:
    ``labels`` (each listed patch's label from the points table, -1 where none), ``index`` (the row of
    the points table each item is), ``meta`` (the store's ``zarrmill.patch_store`` attributes: where
    every patch came from)."""

    def __init__(self, store: str | Path, include_dropped: bool = False, dtype: Any = "float32"):
        self.store = as_location(store)
        self.dtype = np.dtype(dtype) if dtype is not None else None
        meta = zarr.open_group(zarr_url(self.store), mode="r").attrs.get("zarrmill", {}).get("patch_store", {})
        if not meta.get("complete"):
            raise ValueError(f"{self.store}: not a complete zarrmill patch store")
        status = zarr.open_array(zarr_url(self.store / "table" / "status"), mode="r")[...]
        self.index = np.arange(len(status)) if include_dropped else np.flatnonzero(status == 0)
        self.labels = zarr.open_array(zarr_url(self.store / "table" / "label"), mode="r")[...][self.index]
        self.meta = dict(meta)
        self._patches = None

    def __len__(self) -> int:
        """The number of patches listed (kept ones, or every row with ``include_dropped``)."""
        return len(self.index)

    def __getitem__(self, i: int) -> np.ndarray:
        """Patch ``i`` as a new numpy array of ``dtype`` (float32 by default)."""
        if self._patches is None:  # opened lazily: once per DataLoader worker process
            self._patches = zarr.open_array(zarr_url(self.store / "patches"), mode="r")
        k = int(self.index[i])
        per_chunk = self._patches.chunks[0]
        # one file read (two in a shard: index, chunk) and one decode, not zarr-python's ~1.5 ms
        # of per-call machinery (the patch read cost 4x the decode)
        chunk = read_chunk(self._patches, (k // per_chunk,) + (0,) * (self._patches.ndim - 1))
        # a copy, never a view: a view would keep the whole decoded chunk alive and be read-only
        return np.array(chunk[k % per_chunk], dtype=self.dtype or chunk.dtype, order="C", copy=True)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_patches"] = None
        return state
