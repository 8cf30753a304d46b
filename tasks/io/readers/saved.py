"""An acquisition as bytes and back, so a resumed step does not read and check a plate's metadata
again (a 1536-well plate: 2.76 M planes). The columns are packed by Blosc2 (a plate's file names
compress ~1000x), the rest is JSON; converters a reader attached (Yokogawa's times and well
names) are named, not pickled."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import msgpack

from ..ngff.acquisition import Acquisition, Channel
from ..ngff.plane_table import FLOAT_COLUMNS, INT_COLUMNS, PlaneTable

FORMAT = 1
SCALARS = ("name", "pixel_size_yx", "z_step", "image_shape_yx", "dtype", "n_rows", "n_cols", "bit_depth", "source",
           "well_names", "unlisted", "acquisition_id", "acquisition_name", "time_axis")


def dump(acq: Acquisition, key: str) -> bytes:
    import blosc2  # here, not at the top: its import (0.2 s, with httpx) would slow every run's start

    tb = acq.table
    columns = {n: blosc2.pack_array2(getattr(tb, n)) for n in INT_COLUMNS + FLOAT_COLUMNS + ("names",)}
    for name in ("times", "wells"):
        if getattr(tb, name) is not None:
            columns[name] = blosc2.pack_array2(getattr(tb, name))
    meta = {n: getattr(acq, n) for n in SCALARS}
    meta.update(channels=[asdict(c) for c in acq.channels], folder=tb.folder, format=FORMAT,
                converters="yokogawa" if tb.time_text is not None or tb.well_of_name is not None else "")
    return msgpack.packb({"key": key, "meta": json.dumps(meta), "columns": columns})


def load(data: bytes, key: str) -> Acquisition | None:
    """The acquisition saved with ``key``; None when it was saved for other inputs or parameters."""
    try:
        saved: dict[str, Any] = msgpack.unpackb(data)
        meta = json.loads(saved["meta"])
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None
    if saved.get("key") != key or meta.get("format") != FORMAT:
        return None
    import blosc2

    cols = {n: blosc2.unpack_array2(v) for n, v in saved["columns"].items()}
    time_text = well_of_name = None
    if meta["converters"] == "yokogawa":
        from .yokogawa import saved_converters

        time_text, well_of_name = saved_converters(meta["source"])
    table = PlaneTable(*(cols[n] for n in INT_COLUMNS + FLOAT_COLUMNS), names=cols["names"], folder=meta["folder"],
                       times=cols.get("times"), wells=cols.get("wells"), time_text=time_text, well_of_name=well_of_name)
    scalars = {n: meta[n] for n in SCALARS}
    scalars["pixel_size_yx"], scalars["image_shape_yx"] = tuple(scalars["pixel_size_yx"]), tuple(scalars["image_shape_yx"])
    return Acquisition(planes=table, channels=[Channel(**c) for c in meta["channels"]], **scalars)
