"""A plate as Fractal's converters (fractal-tasks-core 1.x) write it: OME-NGFF 0.4 on zarr v2
(``.zgroup``/``.zattrs``, ``/`` chunk separators, Blosc), one image ``0`` per well holding its
FOVs side by side, ``omero`` channels whose ``window`` values are strings, and AnnData ROI tables
(``FOV_ROI_table``, ``well_ROI_table``) with ``type: roi_table`` and ``fractal_table_version``.
Written with zarr's and anndata's public APIs, the way those tools do."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

PIXEL = (1.0, 0.5, 0.5)  # z, y, x micrometer
COLUMNS = ["x_micrometer", "y_micrometer", "z_micrometer", "len_x_micrometer", "len_y_micrometer",
           "len_z_micrometer", "x_micrometer_original", "y_micrometer_original"]


def fractal_plate(path: Path, wells: tuple[str, ...] = ("B03", "B05"), fov: tuple[int, int] = (32, 48),
                  fields: int = 2, z: int = 2, channels: int = 2, levels: int = 2, seed: int = 0,
                  string_windows: bool = True) -> dict[str, np.ndarray]:
    """Returns {well path: level-0 pixels (c, z, y, x)}."""
    rng = np.random.default_rng(seed)
    rows = sorted({w[0] for w in wells})
    cols = sorted({w[1:] for w in wells})
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.attrs["plate"] = {
        "acquisitions": [{"id": 0, "name": "20200812-CardiomyocyteDifferentiation14-Cycle1"}],
        "columns": [{"name": c} for c in cols], "rows": [{"name": r} for r in rows],
        "wells": [{"path": f"{w[0]}/{w[1:]}", "rowIndex": rows.index(w[0]), "columnIndex": cols.index(w[1:])}
                  for w in wells],
        "version": "0.4"}
    pixels = {}
    for well in wells:
        wpath = f"{well[0]}/{well[1:]}"
        group = root.require_group(wpath)
        group.attrs["well"] = {"images": [{"path": "0"}], "version": "0.4"}
        image = group.require_group("0")
        data = rng.integers(0, 4000, size=(channels, z, fov[0], fov[1] * fields), dtype=np.uint16)
        pixels[wpath] = data
        _write_levels(image, data, levels)
        image.attrs["multiscales"] = [{
            "axes": [{"name": "c", "type": "channel"}] + [{"name": a, "type": "space", "unit": "micrometer"}
                                                          for a in "zyx"],
            "datasets": [{"path": str(k), "coordinateTransformations": [
                {"type": "scale", "scale": [1.0, PIXEL[0], PIXEL[1] * 2**k, PIXEL[2] * 2**k]}]}
                for k in range(levels)],
            "version": "0.4"}]
        window = ({"min": "0", "max": "65535", "start": "110", "end": "800"} if string_windows
                  else {"min": 0, "max": 65535, "start": 110, "end": 800})
        image.attrs["omero"] = {"id": 1, "name": "TBD", "version": "0.4", "channels": [
            {"wavelength_id": f"A0{k + 1}_C0{k + 1}", "label": f"channel {k + 1}", "color": "00FFFF",
             "active": True, "coefficient": 1, "family": "linear", "window": window} for k in range(channels)]}
        _write_tables(image, fov, fields, z)
    return pixels


def _write_levels(image: zarr.Group, data: np.ndarray, levels: int) -> None:
    from numcodecs import Blosc

    for k in range(levels):
        level = data[..., ::2**k, ::2**k]
        arr = image.create_array(str(k), shape=level.shape, dtype=level.dtype,
                                 chunks=(1, 1) + level.shape[-2:], chunk_key_encoding={"name": "v2", "separator": "/"},
                                 compressors=Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE))
        arr[...] = level


def _write_tables(image: zarr.Group, fov: tuple[int, int], fields: int, z: int) -> None:
    import anndata as ad
    import pandas as pd

    def table(names: list[str], values: list[list[float]]) -> "ad.AnnData":
        frame = pd.DataFrame(np.asarray(values, np.float32), index=names, columns=COLUMNS)
        return ad.AnnData(X=frame.to_numpy(), obs=pd.DataFrame(index=frame.index),
                          var=pd.DataFrame(index=frame.columns))

    h, w = fov[0] * PIXEL[1], fov[1] * PIXEL[2]
    fovs = table([str(i + 1) for i in range(fields)],
                 [[i * w, 0.0, 0.0, w, h, z * PIXEL[0], i * w + 1000.0, 2000.0] for i in range(fields)])
    well = table(["well_1"], [[0.0, 0.0, 0.0, fields * w, h, z * PIXEL[0], 1000.0, 2000.0]])
    tables = image.require_group("tables")
    tables.attrs["tables"] = ["FOV_ROI_table", "well_ROI_table"]
    previous = ad.settings.zarr_write_format
    ad.settings.zarr_write_format = 2
    try:
        for name, t in (("FOV_ROI_table", fovs), ("well_ROI_table", well)):
            ad.io.write_elem(tables, name, t)
            tables[name].attrs.update({"type": "roi_table", "fractal_table_version": "1"})
    finally:
        ad.settings.zarr_write_format = previous
