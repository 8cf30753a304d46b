"""ROI tables of a well image, as Fractal's converters and ngio write them (AnnData on zarr, the
image's own zarr format), so Fractal tasks, ngio and anndata read them without zarrmill:

    <image>/tables/                   attrs {"tables": ["FOV_ROI_table", "well_ROI_table"]}
    <image>/tables/FOV_ROI_table/     AnnData: obs index = FOV name (FieldIndex), X = the
                                      micrometer columns, obs = pixel columns and source_path;
                                      attrs {"type": "roi_table", "fractal_table_version": "1",
                                      "table_version": "1", "backend": "anndata", ...}
    <image>/tables/well_ROI_table/    one row "well_1": the whole well image

FOV columns: x/y/z_micrometer (placed position, relative to the image origin), len_x/y/z_micrometer,
x/y/z_micrometer_original (position before ``shift``) in X (float64: stage positions stay exact);
x/y/z_pixel, x/y/z_pixel_original, len_x/y/z_pixel (level 0) and source_path (the FOV image in the
source plate) in obs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..storage.atomic import read_json_if_exists
from ..storage.guard import OutputGuard
from ..storage.location import as_location, zarr_url
from ..storage.transfer import write_files
from .placement import Fov

TABLE = "FOV_ROI_table"
WELL_TABLE = "well_ROI_table"
ROI_ATTRS = {"type": "roi_table", "fractal_table_version": "1", "table_version": "1", "backend": "anndata",
             "index_key": "FieldIndex", "index_type": "str"}
AXES = ("z", "y", "x")


def table_rows(fovs: list[Fov], scale: tuple[float, ...], origin: tuple[float, ...], axes: str
               ) -> list[dict[str, Any]]:
    """``axes``: the spatial axis names of the FOVs ('zyx' or 'yx'; a missing z reads as 0 / 1).
    Placed micrometers are where the pixels are in the well image; originals are the FOV's exact
    translation, both relative to the well image's origin."""
    rows = []
    for f in fovs:
        row: dict[str, Any] = {"FieldIndex": f.name}
        for ax in AXES:
            k = axes.find(ax)
            px, px0, size = (f.pixel[k], f.original_pixel[k], f.size[k]) if k >= 0 else (0, 0, 1)
            s = scale[k] if k >= 0 else 1.0
            row[f"{ax}_micrometer"] = round(px * s, 6)
            row[f"len_{ax}_micrometer"] = round(size * s, 6)
            row[f"{ax}_micrometer_original"] = round(f.origin_um[k] - origin[k], 6) if k >= 0 else 0.0
            row[f"{ax}_pixel"], row[f"{ax}_pixel_original"], row[f"len_{ax}_pixel"] = px, px0, size
        row["source_path"] = f.path
        rows.append(row)
    return rows


def well_row(shape: tuple[int, ...], scale: tuple[float, ...], axes: str) -> dict[str, Any]:
    """The well ROI: the whole well image (``shape``/``scale`` of its spatial axes, level 0)."""
    row: dict[str, Any] = {"FieldIndex": "well_1"}
    for ax in AXES:
        k = axes.find(ax)
        row[f"{ax}_micrometer"] = 0.0
        row[f"len_{ax}_micrometer"] = round(shape[k] * scale[k], 6) if k >= 0 else 1.0
    return row


def write_roi_tables(image: Path, fov_rows: list[dict[str, Any]], well: dict[str, Any], source: str,
                     guard: OutputGuard) -> None:
    """Both tables, replacing earlier versions (a rerun writes the same content) through the output
    guard: a table zarrmill did not write is never replaced."""
    zarr_format = zarr.open_group(zarr_url(image), mode="r").metadata.zarr_format
    # the tables group is written with the tables (its zarr.json among their files), not before
    meta = read_json_if_exists(as_location(image) / "tables" / ("zarr.json" if zarr_format == 3 else ".zattrs"))
    old = (meta.get("attributes", {}) if zarr_format == 3 else meta) if meta is not None else None
    names = sorted(set((old or {}).get("tables", [])) | {TABLE, WELL_TABLE})
    files: dict[str, Any] = {}
    memory = zarr.open_group(zarr.storage.MemoryStore(files), mode="w", zarr_format=zarr_format,
                             attributes={"tables": names})
    for name, rows in ((TABLE, fov_rows), (WELL_TABLE, [well])):
        write_anndata(memory, name, rows, {**ROI_ATTRS, "zarrmill_source_plate": source})
        # whatever is at the table's path goes through the guard, listed in the tables group or not
        # (a neighbour's folder or objects there are refused, never written into)
        node = as_location(image) / "tables" / name
        if not guard.skips_look(node) and guard.place.node_there(node):
            guard.remove(node, " (an ROI table of the same name)")
        guard.will_create(node, absent=True)  # this run's: a later look (follow's next round) is not skipped
    # each file's path judged as it is written: a link planted at tables/ (or below) leading out of
    # the output is refused, never written through
    tables = guard.contain(as_location(image) / "tables", "the ROI tables' folder")
    write_files(tables, {key: buffer.to_bytes() for key, buffer in files.items()
                         if guard.contain(tables / key, "an ROI table file")})


def write_anndata(group: zarr.Group, name: str, rows: list[dict[str, Any]], attrs: dict[str, Any]) -> None:
    """``rows`` as an AnnData table, encoded as anndata encodes it (0.1.0; dataframes 0.2.0): the
    index from FieldIndex, float columns in X (var names = their names), the others in obs.

    Why not anndata itself: importing it (pandas, scipy, dask.array) and its per-node writes cost
    ~2.7 s a plate step for six tiny tables (measured), more than the pixels. Built in a zarr
    MemoryStore with zarr-python (its own string and number encodings), then written as files;
    tests/test_fov_table.py reads the tables back with anndata and ngio and compares them with
    anndata's own output."""
    columns = list(dict.fromkeys(k for row in rows for k in row if k != "FieldIndex"))
    values = {c: [row.get(c) for row in rows] for c in columns}
    floats = [c for c in columns if any(isinstance(v, float) for v in values[c])]
    others = [c for c in columns if c not in floats]
    table = group.create_group(name, attributes={"encoding-type": "anndata", "encoding-version": "0.1.0", **attrs})
    _array(table, "X", np.array([[float(row.get(c, np.nan)) for c in floats] for row in rows],
                                dtype=np.float64).reshape(len(rows), len(floats)))
    obs = _dataframe(table, "obs", others, "FieldIndex")
    _array(obs, "FieldIndex", [str(row["FieldIndex"]) for row in rows])
    for c in others:
        _array(obs, c, values[c])
    _array(_dataframe(table, "var", [], "_index"), "_index", floats)
    for empty in ("layers", "obsm", "obsp", "uns", "varm", "varp"):
        table.create_group(empty, attributes={"encoding-type": "dict", "encoding-version": "0.1.0"})


def _dataframe(parent: zarr.Group, name: str, columns: list[str], index: str) -> zarr.Group:
    return parent.create_group(name, attributes={"column-order": columns, "_index": index,
                                                 "encoding-type": "dataframe", "encoding-version": "0.2.0"})


def _array(parent: zarr.Group, name: str, values: Any) -> None:
    """A numeric array, or a string array (zarr's variable-length UTF-8) for text."""
    data = np.asarray(values)
    text = data.dtype.kind in "UO" or data.size == 0 and not isinstance(values, np.ndarray)
    kind = "string-array" if text else "array"
    arr = parent.create_array(name, shape=data.shape, dtype=str if text else data.dtype,
                              chunks=tuple(max(1, n) for n in data.shape),
                              attributes={"encoding-type": kind, "encoding-version": "0.2.0"})
    if data.size:
        arr[...] = data.astype(object) if text else data


def read_roi_table(image: Path, name: str = TABLE) -> list[dict[str, Any]]:
    """Rows as dicts (FieldIndex, every column), read with anndata from the image's tables."""
    from anndata.io import read_elem

    table = read_elem(zarr.open_group(zarr_url(as_location(image) / "tables" / name), mode="r"))
    rows = []
    for i, index in enumerate(table.obs_names):
        row: dict[str, Any] = {"FieldIndex": str(index)}
        row.update({c: float(v) for c, v in zip(table.var_names, np.asarray(table.X)[i])})
        row.update({c: (v.item() if hasattr(v, "item") else v) for c, v in table.obs.iloc[i].items()})
        rows.append(row)
    return rows


def read_fov_table(image: Path) -> list[dict[str, Any]]:
    return read_roi_table(image, TABLE)


def read_fov(image: Path, name: str, level: str = "0") -> np.ndarray:
    """The inverse view: one FOV's pixels cut back out of a well image through its FOV table
    (level 0 positions)."""
    from .metadata import read_image

    row = next((r for r in read_fov_table(image) if r["FieldIndex"] == name), None)
    if row is None:
        raise KeyError(f"{image}: no FOV named {name!r} in {TABLE}")
    names = read_image(as_location(image)).axis_names
    sl = tuple(slice(int(row[f"{a}_pixel"]), int(row[f"{a}_pixel"]) + int(row[f"len_{a}_pixel"]))
               if a in AXES else slice(None) for a in names)
    return np.asarray(zarr.open_array(zarr_url(as_location(image) / level), mode="r")[sl])
