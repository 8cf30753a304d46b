"""FOV tables: one row per field of view of a well image, in the Fractal ROI-table convention
stored with ngio's CSV table backend, so ngio (and any CSV reader) reads them without zarrmill:

    <image>/tables/                 attrs {"tables": ["FOV_ROI_table"]}
    <image>/tables/FOV_ROI_table/   attrs {"type": "roi_table", "backend": "csv",
                                           "index_key": "FieldIndex", "index_type": "str",
                                           "table_version": "1"}
    <image>/tables/FOV_ROI_table/table.csv

Columns: FieldIndex, x/y/z_micrometer (placed position, relative to the image origin),
len_x/y/z_micrometer, x/y/z_micrometer_original (position before ``shift``), plus zarrmill's
x/y/z_pixel, x/y/z_pixel_original, len_x/y/z_pixel (level 0) and source_path (the FOV image in the
source plate)."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from .atomic import atomic_write_bytes
from .placement import Fov

TABLE = "FOV_ROI_table"
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


def write_fov_table(image: Path, rows: list[dict[str, Any]], zarr_format: int, source: str) -> None:
    tables = zarr.open_group(str(image / "tables"), mode="a", zarr_format=zarr_format)
    tables.attrs["tables"] = sorted(set(tables.attrs.get("tables", [])) | {TABLE})
    group = zarr.open_group(str(image / "tables" / TABLE), mode="a", zarr_format=zarr_format)
    group.attrs.update({"type": "roi_table", "backend": "csv", "index_key": "FieldIndex",
                        "index_type": "str", "table_version": "1", "zarrmill_source_plate": source})
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(image / "tables" / TABLE / "table.csv", buf.getvalue().encode())


def read_fov_table(image: Path) -> list[dict[str, Any]]:
    with open(Path(image) / "tables" / TABLE / "table.csv", newline="") as fh:
        return list(csv.DictReader(fh, quoting=csv.QUOTE_NONNUMERIC))


def read_fov(image: Path, name: str, level: str = "0") -> np.ndarray:
    """The inverse view: one FOV's pixels cut back out of a well image through its FOV table
    (level 0 positions)."""
    from .ngff import read_image

    row = next((r for r in read_fov_table(image) if r["FieldIndex"] == name), None)
    if row is None:
        raise KeyError(f"{image}: no FOV named {name!r} in {TABLE}")
    names = read_image(Path(image)).axis_names
    sl = tuple(slice(int(row[f"{a}_pixel"]), int(row[f"{a}_pixel"]) + int(row[f"len_{a}_pixel"]))
               if a in AXES else slice(None) for a in names)
    return np.asarray(zarr.open_array(str(Path(image) / level), mode="r")[sl])
