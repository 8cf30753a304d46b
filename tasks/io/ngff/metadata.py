"""Read and write OME-NGFF image metadata (0.4 on zarr v2, 0.5 and 0.6 on zarr v3; 0.6's coordinate
systems and transformations in ngff06.py).

The writers build the documents themselves: ome-zarr-py's writer functions give the same JSON
(tests/test_ngff_writers.py compares them), but importing ome_zarr loads dask.array, xarray and
pandas, 1.4 s of every step's wall time (measured), to write three small JSON documents. Outputs
are checked against the official schemas and opened by ome-zarr-py, ngio, napari and bioio in the
tests."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import zarr
from pydantic import BeforeValidator

from ...errors import InputError, InputNotFoundError
from ..storage.atomic import read_json, read_json_if_exists
from . import ngff06
from .foreign import clean_omero
from ..storage.guard import inside
from ..storage.location import as_location

from ..storage.handles import writable_url

NGFF_FORMATS = {"0.4": 2, "0.5": 3, "0.6": 3}
# YAML reads `0.4` as a number: accept it as the version string users mean.
NgffVersion = Annotated[Literal["0.4", "0.5", "0.6"], BeforeValidator(lambda v: str(v) if isinstance(v, float) else v)]


@dataclass
class Level:
    path: str
    scale: list[float]
    translation: list[float] | None


@dataclass
class ImageMeta:
    path: Path
    version: str
    axes: list[dict[str, Any]]
    levels: list[Level]
    attrs: dict[str, Any]  # the whole NGFF attribute dict (multiscales, omero, ...)
    placed: bool = False  # 0.6: level 0's translation came from the image's well (its scene)

    @property
    def zarr_format(self) -> int:
        return NGFF_FORMATS.get(self.version, 3)

    @property
    def axis_names(self) -> list[str]:
        return [a["name"] for a in self.axes]


AXIS_TYPES = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}
AXIS_UNITS = {"time": "second", "space": "micrometer"}


def make_axes(names: str | list[str]) -> list[dict[str, Any]]:
    """NGFF axes for names from 'tczyx', with units (micrometer, second)."""
    axes = []
    for name in names:
        kind = AXIS_TYPES[name]
        axis = {"name": name, "type": kind}
        if kind in AXIS_UNITS:
            axis["unit"] = AXIS_UNITS[kind]
        axes.append(axis)
    return axes


def read_attrs(path: Path) -> tuple[dict[str, Any], int]:
    """(NGFF attributes, zarr format) of a group; for 0.5 the ``ome`` object, for 0.4 ``.zattrs``."""
    path = as_location(path)
    meta = read_json_if_exists(path / "zarr.json")
    if meta is not None:
        attrs = meta.get("attributes", {})
        return (attrs["ome"] if "ome" in attrs else attrs), 3
    if (path / ".zattrs").exists() or (path / ".zgroup").exists():
        return (read_json(path / ".zattrs") if (path / ".zattrs").exists() else {}), 2
    if not path.exists():
        raise InputNotFoundError(f"{path}: does not exist")
    raise InputError(f"{path}: not a zarr group (no zarr.json or .zgroup)")


def member_path(root: Path, rel: Any, what: str) -> Path:
    """``root/rel`` for a path read from metadata: a non-empty string of plain names that stays
    inside ``root`` (no '..', no absolute path, no link out), else one clear error."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
        raise InputError(f"{root}: {what} {rel!r} must be a relative path of plain names inside the store "
                         "(no '..', no leading '/'); fix the metadata")
    return inside(root, *rel.split("/"), what=what, resolve=False)  # reading may follow links


def level_index(meta: ImageMeta, level: int) -> int:
    """``level`` if the image has it; asking for a level it lacks is an error, never another level."""
    if not 0 <= level < len(meta.levels):
        raise InputError(f"{meta.path}: has levels 0..{len(meta.levels) - 1}, not level {level}; choose one of them "
                         "(or run pyramid first)")
    return level


def check_dimensions(meta: ImageMeta, level: Level, shape: tuple[int, ...]) -> None:
    """The array of a level has one dimension per axis the metadata lists."""
    if len(shape) != len(meta.axes):
        raise InputError(f"{meta.path}: array {level.path!r} has {len(shape)} dimensions {list(shape)} but multiscales "
                         f"lists {len(meta.axes)} axes ({', '.join(meta.axis_names)}); fix the axes metadata")


def read_image(path: Path) -> ImageMeta:
    path = as_location(path)
    attrs, zarr_format = read_attrs(path)
    if "omero" in attrs:  # other tools' omero (string windows, ...) is made schema-valid on read
        omero = clean_omero(attrs["omero"], path)
        attrs = {k: v for k, v in attrs.items() if k != "omero"}
        if omero is not None:
            attrs["omero"] = omero
    multiscales = attrs.get("multiscales")
    if not multiscales and "bioformats2raw.layout" in attrs:
        series = sorted((c.name for c in path.iterdir() if c.name.isdigit()), key=int) if path.is_dir() else []
        raise InputError(f"{path}: a bioformats2raw container, not one image; give one of its images, e.g. "
                         f"{path / (series[0] if series else '0')} (series: {', '.join(series[:10]) or 'none'})")
    if not multiscales:
        raise InputError(f"{path}: not an OME-Zarr image (no multiscales metadata)")
    ms = multiscales[0] if isinstance(multiscales, list) else None
    if not isinstance(ms, dict) or not all(isinstance(ds, dict) for ds in ms.get("datasets") or []):
        raise InputError(f"{path}: multiscales must be a list of objects whose datasets are objects; fix the metadata")
    version = ngff06.normalized(attrs.get("version") or ms.get("version") or ("0.5" if zarr_format == 3 else "0.4"))
    listed = ngff06.axes_of(ms, str(path)) if version == "0.6" else ms.get("axes", [])
    axes = [a if isinstance(a, dict) else {"name": a} for a in listed]
    placed = ngff06.scene_offset(path, read_attrs) if version == "0.6" else None
    levels = []
    if not isinstance(ms.get("datasets"), list) or not ms["datasets"]:
        raise InputError(f"{path}: multiscales has no datasets; fix the image metadata")
    for ds in ms["datasets"]:
        member_path(path, ds.get("path"), "multiscales dataset path")
        scale, translation = _transforms(ms, ds, len(axes), path)
        if placed is not None and len(placed) == len(axes):  # the field's place in its well (0.6 scene)
            translation = [a + b for a, b in zip(translation or [0.0] * len(axes), placed)]
        for name, values in (("scale", scale), ("translation", translation)):
            if values is not None and len(values) != len(axes):
                raise InputError(f"{path}: dataset {ds['path']!r} has a {name} of {len(values)} values but "
                                 f"multiscales lists {len(axes)} axes ({', '.join(a.get('name', '?') for a in axes)}); "
                                 "axes and transforms must match the array's dimensions")
        levels.append(Level(ds["path"], scale, translation))
    _check_axes(path, axes)
    meta = ImageMeta(path, str(version), axes, levels, attrs, placed=placed is not None)
    _check_level_arrays(meta)
    return meta


def _check_axes(path: Path, axes: list[dict[str, Any]]) -> None:
    """Axis names are strings, present and unique: a task copies them into what it writes, which
    ``zarrmill check`` (and the NGFF schemas) would then reject."""
    names = [a.get("name") for a in axes]
    if not axes or not all(isinstance(n, str) and n for n in names):
        raise InputError(f"{path}: multiscales axes {names!r} must each have a name; fix the axes metadata")
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise InputError(f"{path}: multiscales axes {names} name {', '.join(doubled)} more than once; axis "
                         "names must be unique; fix the axes metadata")


def _check_level_arrays(meta: ImageMeta) -> None:
    """Every level that exists has one dimension per axis and level 0's dtype (read from the small
    array metadata; levels not written yet are the pyramid task's business)."""
    first: tuple[str, str] | None = None
    for lv in meta.levels:
        apath = as_location(meta.path) / lv.path
        doc = read_json_if_exists(apath / "zarr.json")
        if doc is not None:
            if isinstance(doc, dict) and doc.get("node_type") == "group":
                raise InputError(f"{apath}: a zarr group, not an array; multiscales lists it as level {lv.path!r}; "
                                 "fix the metadata")
            shape, dtype = doc.get("shape"), doc.get("data_type")
        elif (apath / ".zgroup").exists() and not (apath / ".zarray").exists():
            raise InputError(f"{apath}: a zarr group, not an array; multiscales lists it as level {lv.path!r}; "
                             "fix the metadata")
        elif (apath / ".zarray").exists():
            doc = read_json(apath / ".zarray")
            shape, dtype = doc.get("shape"), doc.get("dtype")
        else:
            continue
        if not isinstance(doc, dict) or not isinstance(shape, list):
            raise InputError(f"{apath}: array metadata without a shape; the store is damaged")
        check_dimensions(meta, lv, tuple(shape))
        dtype = str(np.dtype(dtype)) if _is_dtype(dtype) else str(dtype)
        if first is None:
            first = (lv.path, dtype)
        elif dtype != first[1]:
            raise InputError(f"{meta.path}: level {lv.path!r} is {dtype} but level {first[0]!r} is {first[1]}; "
                             "every level of an image must have one dtype; fix or remove that level")


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except (TypeError, ValueError):
        return False
    return True


def _transforms(ms: dict[str, Any], ds: dict[str, Any], ndim: int, path: Path) -> tuple[list[float], list[float] | None]:
    scale, translation = [1.0] * ndim, None
    where = f"{path}: dataset {ds.get('path')!r}"
    for ct in ngff06.flat_transforms(_transform_list(ds, where)):
        if ct.get("type") == "scale":
            scale = transform_values(ct.get("scale"), "scale", where)
        elif ct.get("type") == "translation":
            translation = transform_values(ct.get("translation"), "translation", where)
    for ct in _transform_list(ms, f"{path}: multiscales"):  # multiscale-level transforms compose
        if ct.get("type") == "scale" and "input" not in ct:  # 0.6: between named systems, not levels
            scale = [a * b for a, b in zip(scale, transform_values(ct.get("scale"), "scale", f"{path}: multiscales"))]
    return scale, translation


def _transform_list(node: dict[str, Any], where: str) -> list[dict[str, Any]]:
    cts = node.get("coordinateTransformations", [])
    if not isinstance(cts, list) or not all(isinstance(ct, dict) for ct in cts):
        raise InputError(f"{where}: coordinateTransformations must be a list of objects; fix the metadata")
    return cts


def transform_values(values: Any, kind: str, where: str) -> list[float]:
    """A scale (finite, > 0) or translation (finite) as floats, else one line naming it."""
    try:
        out = [float(v) for v in values if not isinstance(v, bool)]
        if len(out) != len(values):
            raise TypeError
    except (TypeError, ValueError):
        raise InputError(f"{where}: {kind} {values!r} is not a list of numbers; fix the metadata") from None
    if not all(math.isfinite(v) for v in out) or (kind == "scale" and any(v <= 0 for v in out)):
        need = "positive finite numbers" if kind == "scale" else "finite numbers"
        raise InputError(f"{where}: {kind} {values!r} must hold {need}; fix the metadata")
    return out


def level_datasets(levels: list[Level]) -> list[dict[str, Any]]:
    out = []
    for lv in levels:
        cts: list[dict[str, Any]] = [{"type": "scale", "scale": _clean(lv.scale)}]
        if lv.translation is not None and any(lv.translation):
            cts.append({"type": "translation", "translation": _clean(lv.translation)})
        out.append({"path": lv.path, "coordinateTransformations": cts})
    return out


def _clean(values: list[float]) -> list[float]:
    """Round away float noise (0.24375000000000002 -> 0.24375) so metadata reads as written."""
    return [float(round(v, 9)) for v in values]


def write_image_metadata(path: Path, version: str, axes: list[dict[str, Any]], levels: list[Level],
                         name: str | None = None, extra: dict[str, Any] | None = None, placed: bool = False,
                         own: dict[str, Any] | None = None) -> None:
    """Write multiscales (and omero) on the image group; other NGFF keys in ``extra`` (e.g.
    ``labels``) go beside them (inside ``ome`` for 0.5 and 0.6); ``own`` keys (zarrmill's, not
    NGFF's) at the top of the attributes. One write of the group's attributes. ``placed``: in 0.6,
    level 0's translation is the image's place in its well and goes into the well's scene
    (ngff06.py), not into the image."""
    if not levels:
        raise ValueError(f"{path}: an image needs at least one level")
    ndim = len(axes)
    datasets = level_datasets(levels)
    for ds in datasets:
        for ct in ds["coordinateTransformations"]:
            if len(ct[ct["type"]]) != ndim:
                raise ValueError(f"{path}: level {ds['path']} has a {ct['type']} of {len(ct[ct['type']])} "
                                 f"values for {ndim} axes")
    extra = dict(extra or {})
    omero = extra.pop("omero", None)  # None: no omero document (never written as null)
    values: dict[str, Any] = {} if omero is None else {"omero": omero}
    multiscale: dict[str, Any] = {"datasets": datasets, "name": name or "/", "axes": axes}
    if version == "0.4":
        multiscale["version"] = version
    else:
        values["version"] = ngff06.written(version)
    if version == "0.6":
        multiscale = ngff06.multiscale(axes, levels, name or "/", placed)
    values["multiscales"] = [multiscale]
    values.update(extra)
    update_ngff_attrs(zarr.open_group(writable_url(path), mode="a", zarr_format=NGFF_FORMATS[version]), version, values,
                      own)


def write_well_metadata(path: Path, version: str, images: list[str], acquisition: int = 0,
                        placed: tuple[list[dict[str, Any]], dict[str, list[float]]] | None = None) -> None:
    """The well document: its images, all from one plate acquisition. ``placed`` (0.6): the images'
    axes and each image's translation into the well (its scene, ngff06.py)."""
    well: dict[str, Any] = {"images": [{"path": im, "acquisition": acquisition} for im in images]}
    group = zarr.open_group(writable_url(path), mode="a", zarr_format=NGFF_FORMATS[version])
    if version == "0.4":
        group.attrs["well"] = {**well, "version": version}
    elif version == "0.6":
        scene = {"scene": ngff06.well_scene(*placed)} if placed else {}
        group.attrs["ome"] = {"version": ngff06.written(version), "well": well, **scene}
    else:
        group.attrs["ome"] = {"version": version, "well": well}


def well_acquisition(images: list[dict[str, Any]]) -> int:
    """The plate acquisition a well's images belong to (0 when they do not say)."""
    return next((im["acquisition"] for im in images if isinstance(im.get("acquisition"), int)), 0)


def write_plate_metadata(path: Path, version: str, rows: list[str], columns: list[str], wells: list[str],
                         name: str | None, field_count: int, acquisitions: list[dict[str, Any]]) -> None:
    """The plate document; ``wells`` are 'row/column' paths on the given grid."""
    for labels, what in ((rows, "row"), (columns, "column")):
        if len(set(labels)) != len(labels) or not all(str(v).isalnum() for v in labels):
            raise ValueError(f"{path}: plate {what} names must be unique and alphanumeric: {labels}")
    entries = []
    for well in wells:
        row, _, column = well.partition("/")
        if row not in rows or column not in columns or "/" in column:
            raise ValueError(f"{path}: well {well!r} is not a 'row/column' path on the plate grid")
        entries.append({"path": well, "rowIndex": rows.index(row), "columnIndex": columns.index(column)})
    plate: dict[str, Any] = {"columns": [{"name": c} for c in columns], "rows": [{"name": r} for r in rows],
                             "wells": entries}
    if name is not None:
        plate["name"] = name
    plate["field_count"] = field_count
    plate["acquisitions"] = acquisitions
    if version != "0.6":  # 0.6 keeps the version once, in "ome"
        plate["version"] = version
    group = zarr.open_group(writable_url(path), mode="a", zarr_format=NGFF_FORMATS[version])
    if version == "0.4":
        group.attrs["plate"] = plate
    else:
        group.attrs["ome"] = {"version": ngff06.written(version), "plate": plate}


def update_ngff_attrs(group: zarr.Group, version: str, values: dict[str, Any],
                      own: dict[str, Any] | None = None) -> None:
    if version == "0.4":
        group.attrs.update({**values, **(own or {})})
    else:
        ome = dict(group.attrs.get("ome", {}))
        ome.update(values)
        group.attrs.update({"ome": ome, **(own or {})})  # one write, as before


def plate_images(root: Path) -> list[str] | None:
    """Image paths (relative to the plate) of every field of every well; None if not a plate."""
    root = as_location(root)
    attrs, _ = read_attrs(root)
    plate = attrs.get("plate")
    if plate is None:
        return None
    images = []
    for well in plate.get("wells", []):
        well_attrs, _ = read_attrs(member_path(root, well.get("path"), "plate well path"))
        for image in well_attrs.get("well", {}).get("images", []):
            member_path(root / well["path"], image.get("path"), "well image path")
            images.append(f"{well['path']}/{image['path']}")
    return images
