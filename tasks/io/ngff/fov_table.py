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

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import zarr

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


def write_roi_tables(image: Path, fov_rows: list[dict[str, Any]], well: dict[str, Any], source: str) -> None:
    """Both tables, replacing earlier versions (a rerun writes the same content)."""
    group = zarr.open_group(str(image), mode="a")
    tables = group.require_group("tables")
    for name, rows in ((TABLE, fov_rows), (WELL_TABLE, [well])):
        if name in tables:
            del tables[name]
        with warnings.catch_warnings():  # anndata's notices about future zarr defaults
            warnings.simplefilter("ignore")
            _write_elem(tables, name, _anndata(rows))
        tables[name].attrs.update({**ROI_ATTRS, "zarrmill_source_plate": source})
    tables.attrs["tables"] = sorted(set(tables.attrs.get("tables", [])) | {TABLE, WELL_TABLE})


def _anndata(rows: list[dict[str, Any]]) -> Any:
    import anndata as ad
    import pandas as pd

    frame = pd.DataFrame(rows).set_index("FieldIndex")
    frame.index = frame.index.astype(str)
    floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
    obs = frame[[c for c in frame.columns if c not in floats]]
    return ad.AnnData(X=frame[floats].to_numpy(np.float64), obs=obs, var=pd.DataFrame(index=floats))


def _write_elem(group: zarr.Group, name: str, table: Any) -> None:
    from anndata.io import write_elem

    write_elem(group, name, table)


def read_roi_table(image: Path, name: str = TABLE) -> list[dict[str, Any]]:
    """Rows as dicts (FieldIndex, every column), read with anndata from the image's tables."""
    from anndata.io import read_elem

    table = read_elem(zarr.open_group(str(Path(image) / "tables" / name), mode="r"))
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
    names = read_image(Path(image)).axis_names
    sl = tuple(slice(int(row[f"{a}_pixel"]), int(row[f"{a}_pixel"]) + int(row[f"len_{a}_pixel"]))
               if a in AXES else slice(None) for a in names)
    return np.asarray(zarr.open_array(str(Path(image) / level), mode="r")[sl])
