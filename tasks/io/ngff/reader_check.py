"""Open a store the way ome-zarr-py's ``Reader`` does (which ``ome_zarr info`` and napari-ome-zarr
build on): the image, the plate (each well's first image, tiled by row and column) and every well
(its images tiled in a grid). Only the lazy arrays are built, no pixels are read; a well or plate
whose pieces do not line up fails here exactly as it fails in those readers."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any


def reader_problems(root: Path, wells: list[str], whole_plate: bool = True) -> list[str]:
    """``wells``: the plate's well paths (each is opened on its own, as a viewer does on a click);
    ``whole_plate`` False: a sparse plate (wells of different acquisitions, channels and time
    points), which ome-zarr-py's plate view cannot stack into one array: only its wells are opened."""
    problems = []
    for path in ([root] if whole_plate else []) + [root / w for w in wells]:
        problem = _open(path)
        if problem:
            problems.append(f"{path}: ome-zarr-py's Reader (and so napari and `ome_zarr info`) cannot open it: "
                            f"{problem}")
    return problems


def _open(path: Path) -> str:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    quiet = logging.getLogger("ome_zarr")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs, then zero-fills, arrays it cannot load; we report what fails
    try:
        location = parse_url(str(path))
        if location is None:
            return "not a zarr store"
        for node in Reader(location)():
            _shapes(node.data)
    except Exception as err:  # noqa: BLE001 - whatever the reader raises is the finding
        return f"{type(err).__name__}: {err}"
    finally:
        quiet.setLevel(level)
    return ""


def _shapes(data: list[Any]) -> list[tuple[int, ...]]:
    return [tuple(level.shape) for level in data]
