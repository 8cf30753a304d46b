"""Add a label mask (segmentation: TIFF / OME-TIFF / .npy, integers) to an OME-Zarr image, or to
one field of a plate, as ``<image>/labels/<name>``: the NGFF label layout that ome-zarr-py,
napari, ngio and Fractal read.

The mask must have the image's shape on every axis but channels (a 2-D mask for a y/x image, a
z/y/x mask for a z-stack, with t where the image has t). Level 0 takes the image's level-0 scale
and translation, so the label lies on its pixels; lower levels are built with ``mode`` (the most
common label of each block; a mean would invent labels) down to ``min_size``. Metadata comes last:
the label image, then ``image-label`` (source: the image) and the ``labels`` list of the image,
which gains the name. A name already there that zarrmill did not write is never replaced."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from pydantic import Field, field_validator

from . import pyramid
from .errors import InputError, OutputExistsError
from .io.ngff import ngff06
from .io.ngff.metadata import (
    NGFF_FORMATS,
    ImageMeta,
    Level,
    read_attrs,
    read_image,
    update_ngff_attrs,
    write_image_metadata,
)
from .io.readers.volume import open_volume
from .io.storage.nodes import ArrayNode, GroupNode
from .io.storage.arrays import ArraySpec, Codec, open_for_write, open_input_array
from .runtime.core.regions import group_regions
from .runtime.core.contract import MAX_INDEX, THREADS, PlanContext, TaskParams
from .runtime.core.units import RegionUnit, describe_region
from .io.storage.location import as_location, zarr_url
from .io.storage.handles import writable_url

LabelUnit = RegionUnit | pyramid.LevelUnit  # a region of the mask copied into level 0; the levels below (run by the engine)

UNIT_MB = 64

WORKERS = THREADS  # its units read files and run numpy and Blosc, all outside the GIL

# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "organ/segmentation.npy", "image": "organ/brain.ome.zarr", "name": "cells",
                      "min_size": 32},
           "sample": ["organ-points", "organ"],
           "note": "`segmentation.npy` is a segmentation of `brain.ome.zarr`: integers (0 = background), "
                   "shape (24, 96, 96), z, y, x; it is written to `organ/brain.ome.zarr/labels/cells`."}


class Params(TaskParams):
    OBJECT_STORES = True  # the image may be s3://; the mask file is read locally
    LOCAL_FIELDS = ("input",)
    URL_FIELDS = (("input", False), ("image", True))

    input: str = Field(description="label mask: TIFF / OME-TIFF / .npy of integers")
    image: str = Field(description="OME-Zarr image (or plate field, e.g. plate.zarr/B/03/0) the mask labels")
    name: str = Field("cells", description="label name: written to <image>/labels/<name> (letters, digits, - _)")
    axes: str | None = Field(None, description="axes of the mask file, when it does not say (e.g. 'zyx')")
    min_size: int = Field(64, ge=1, le=MAX_INDEX, description="pyramid: stop once a level's largest y/x side is at most this")
    codec: Codec = Field(default_factory=lambda: Codec(cname="zstd", clevel=5, shuffle="bitshuffle"),
                         description="Blosc settings of the label levels (bitshuffle suits label images: few "
                                     "distinct integers)")

    @field_validator("name")
    @classmethod
    def _plain(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "-_" for c in v):
            raise ValueError("name must be letters, digits, '-' or '_' (it becomes a folder name)")
        return v

    def input_paths(self) -> list[Path]:
        return [Path(self.input), as_location(self.image)]

    def ledger_root(self) -> Path:
        return as_location(self.image)

    def output_path(self) -> Path:
        return as_location(self.image)

    def writes_in_place(self) -> bool:
        return True  # adds labels/<name> to the image; never touches its arrays

    def label_path(self) -> str:
        return f"labels/{self.name}"

    def pyramid_params(self) -> pyramid.Params:
        return pyramid.Params(input=self.image, method="mode", z_factor="auto", min_size=self.min_size,
                              codec=self.codec)


def _label_meta(p: Params) -> tuple[ImageMeta, ArraySpec]:
    """The label image's metadata (level 0 only) and its level-0 array, checked against the image."""
    image = read_image(as_location(p.image))
    arr = open_input_array(as_location(p.image) / image.levels[0].path)
    keep = [i for i, a in enumerate(image.axis_names) if a != "c"]
    names = "".join(image.axis_names[i] for i in keep)
    vol = open_volume(p.input, p.axes)
    try:
        axes, shape, dtype = vol.axes, vol.shape, vol.dtype
    finally:
        vol.close()
    if axes != names or shape != tuple(arr.shape[i] for i in keep):
        raise InputError(f"{p.input}: mask {axes} {list(shape)} does not match image {p.image}, which needs "
                         f"{names} {[arr.shape[i] for i in keep]} (its axes without c); give axes or the right mask")
    if dtype.kind not in "iub":
        raise InputError(f"{p.input}: a label mask holds integers; this one is {dtype}")
    level0 = image.levels[0]
    translation = [level0.translation[i] for i in keep] if level0.translation else None
    meta = ImageMeta(as_location(p.image) / p.label_path(), image.version, [image.axes[i] for i in keep],
                     [Level("0", [level0.scale[i] for i in keep], translation)],
                     {"multiscales": [{}], "image-label": {}}, placed=image.placed)
    chunks = tuple(min(s, 64) if a == "z" else (1 if a == "t" else min(s, 512)) for a, s in zip(names, shape))
    dtype = np.dtype("uint8") if dtype.kind == "b" else dtype
    return meta, ArraySpec(shape, str(dtype), chunks, None, p.codec, NGFF_FORMATS[image.version], tuple(names))


def plan(p: Params, ctx: PlanContext) -> list[LabelUnit]:
    meta, spec = _label_meta(p)
    root = as_location(p.image)
    target = root / p.label_path()
    if target.exists() and ctx.guard is not None and not ctx.guard.may_replace(target):
        raise OutputExistsError(f"{target}: a label image zarrmill did not create (not created by zarrmill); "
                                "choose another name")
    for part in ("labels", p.label_path()):
        ctx.nodes.append(GroupNode(root / part, spec.zarr_format))
    ctx.nodes.append(ArrayNode(root / p.label_path(), "0", spec))
    units: list[LabelUnit] = [RegionUnit(id=f"0:{i}", region=[list(r) for r in reg]) for i, reg in
                              enumerate(group_regions(spec.shape, spec.chunks, spec.itemsize, UNIT_MB * 2**20))]
    return units + pyramid.plan_image_levels(p.pyramid_params(), root, p.label_path(), meta, spec, ctx)


def run_unit(p: Params, unit: RegionUnit) -> int:
    vol = open_volume(p.input, p.axes)
    try:
        data = vol.read([(a, b) for a, b in unit.region])
    finally:
        vol.close()
    dst = open_for_write(as_location(p.image) / p.label_path() / "0")
    dst[tuple(slice(a, b) for a, b in unit.region)] = data.astype(dst.dtype, copy=False)
    return data.nbytes


def finish(p: Params, ctx: PlanContext) -> None:
    meta, spec = _label_meta(p)
    root = as_location(p.image) / p.label_path()
    levels = pyramid.pyramid_levels(p.pyramid_params(), meta, spec.shape)
    # 0.5 keeps the version once, in "ome"; 0.4 repeats it in image-label
    label = {"source": {"image": "../../"}, **({"version": "0.4"} if meta.version == "0.4" else {})}
    write_image_metadata(root, meta.version, meta.axes, levels, name=p.name, extra={"image-label": label},
                         placed=meta.placed)  # 0.6: in its image's space; the image's place is its well's
    labels_attrs, _ = read_attrs(as_location(p.image) / "labels")
    names = sorted(set(labels_attrs.get("labels", [])) | {p.name})
    group = zarr.open_group(writable_url(as_location(p.image) / "labels"), mode="a", zarr_format=spec.zarr_format)
    update_ngff_attrs(group, meta.version, {"labels": names, **({"version": ngff06.written(meta.version)}
                                                                if meta.version != "0.4" else {})})


def describe_unit(unit: RegionUnit) -> str:
    return f"level 0 region {describe_region(unit.region)}"
