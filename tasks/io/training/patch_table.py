"""The points table of a patch store (what ``patch-extract`` writes), one row per requested patch: the zarr
columns under ``table/`` (point_id, center, origin, size, label, status) read back as rows. The
table lives in zarr arrays, not in a CSV beside them, so zarr-python walks a patch store without
tripping over a file that is not a zarr node; ``pandas.DataFrame(points_table(store))`` gives it
to any table tool."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import zarr

from ..storage.location import as_location, zarr_url

TABLE_COLUMNS = ("point_id", "center", "origin", "size", "label", "status")
# table/status code -> what it means (index 0 is a kept patch)
PATCH_STATUS = ("kept", "dropped: NaN coordinate", "dropped: center outside the image",
                "dropped: cuboid crosses the image edge (edge: drop)")


def points_table(store: str | Path) -> list[dict[str, Any]]:
    """The points table of a patch store, one dict per requested patch: index (the patch's row in
    the store), point_id (the point's position in the points file), source (the image),
    center_z/y/x, origin_*, size_* (voxels of the image), label and status (``kept`` or
    ``dropped: `` and the reason). ``pandas.DataFrame(points_table(store))`` makes it a table."""
    root = as_location(store)
    cols = {k: zarr.open_array(zarr_url(root / "table" / k), mode="r")[...] for k in TABLE_COLUMNS}
    meta = zarr.open_group(zarr_url(root), mode="r").attrs.get("zarrmill", {}).get("patch_store", {})
    axes = "zyx"[-cols["center"].shape[1]:]
    rows = []
    for i in range(len(cols["point_id"])):
        row: dict[str, Any] = {"index": i, "point_id": int(cols["point_id"][i]), "source": meta.get("source")}
        for name in ("center", "origin", "size"):
            for a, v in zip(axes, cols[name][i]):
                row[f"{name}_{a}"] = round(float(v), 4) if name == "center" else int(v)
        status = int(cols["status"][i])
        row.update(label=int(cols["label"][i]),
                   status=PATCH_STATUS[status] if 0 <= status < len(PATCH_STATUS) else f"unknown ({status})")
        rows.append(row)
    return rows
