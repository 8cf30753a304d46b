"""The FOVs of one well placed on one canvas (``Well``), and one canvas size for all wells of a
plate (``one_canvas``): what reshard and ingest ``layout: well`` compose each well image from."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..storage.arrays import ArraySpec
from ..storage.layout import level_shards
from .hcs import split_side
from .metadata import ImageMeta, Level
from .placement import Fov, Policy, canvas_shape, is_regular_grid, place


class Well:
    """The FOVs of one well placed on its canvas: what its well image is made of. ``meta`` gives
    the axes, pixel size (``scale``: the FOV level used) and omero; ``fovs`` are not placed yet."""

    def __init__(self, path: str, meta: ImageMeta, scale: list[float], fovs: list[Fov], dtype: np.dtype,
                 lead_shape: tuple[int, ...], overlap: Policy, acquisition: int = 0):
        self.path, self.meta, self.level_scale, self.acquisition = path, meta, list(scale), acquisition
        self.dtype, self.lead_shape = np.dtype(dtype), tuple(lead_shape)
        self.spatial = [i for i, a in enumerate(meta.axis_names) if a in "zyx"]
        self.scale = tuple(scale[i] for i in self.spatial)
        self.fovs, self.origin = place(fovs, self.scale, overlap)
        self.shape = self.lead_shape + canvas_shape(self.fovs)

    def spec(self, p: Any, zarr_format: int) -> ArraySpec:
        """``p``: reshard's or ingest's parameters (chunk_yx, codec)."""
        fov_yx = self.fovs[0].size[-2:]
        cy, cx = p.chunk_yx or (split_side(fov_yx[0]), split_side(fov_yx[1]))
        n = len(self.shape)
        chunks = (1,) * (n - 2) + (min(cy, self.shape[-2]), min(cx, self.shape[-1]))
        shards = None
        if zarr_format == 3:
            if is_regular_grid(self.fovs) and not p.chunk_yx:
                shards = (1,) * (n - 2) + tuple(fov_yx)  # one shard per FOV plane, aligned with the grid
                shards = None if shards == chunks else shards  # a one-chunk shard only costs reads
            else:
                fov_bytes = math.prod(fov_yx) * self.dtype.itemsize
                shards = level_shards(self.shape, chunks, [n - 2, n - 1], self.dtype.itemsize, fov_bytes)
        return ArraySpec(self.shape, str(self.dtype), chunks, shards, p.codec, zarr_format,
                         tuple(self.meta.axis_names))

    def image_meta(self, root: Path, version: str) -> ImageMeta:
        """Metadata of the well image (level 0): FOV pixel size, translation = the well origin."""
        translation = [0.0] * len(self.meta.axis_names)
        for k, o in zip(self.spatial, self.origin):
            translation[k] = o
        level0 = Level("0", list(self.level_scale), translation)
        omero = {k: v for k, v in self.meta.attrs.items() if k == "omero"}
        return ImageMeta(root, version, self.meta.axes, [level0], {"multiscales": [{}], **omero})

    def fovs_in(self, region: list[tuple[int, int]]) -> list[dict]:
        """The FOVs touching a canvas region (spatial axes), as JSON for a unit."""
        out = []
        for f in self.fovs:
            if all(a < p + s and p < b for (a, b), p, s in zip(region, f.pixel, f.size)):
                out.append({**f.extra, "path": f.path, "pixel": list(f.pixel), "size": list(f.size)})
        return out


def one_canvas(wells: list[Well]) -> list[Well]:
    """One canvas size (z, y, x) for every well (zero-padded), so plate viewers can tile wells on a
    grid; each well keeps its own channels and time points (a sparse plate's wells differ there)."""
    spatial = {len(w.spatial) for w in wells}
    if len(spatial) == 1:
        n = spatial.pop()
        common = tuple(max(sizes) for sizes in zip(*[w.shape[-n:] for w in wells]))
        for well in wells:
            well.shape = well.shape[:-n] + common
    return wells
