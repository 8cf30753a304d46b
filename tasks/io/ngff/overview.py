"""Layout of a plate overview: every well's image, at one pyramid level, in a cell at its plate
row/column, so a whole plate is one small image (and a small pyramid)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import warn

MARGIN = 0.1  # of a cell, between wells


@dataclass
class OverviewLayout:
    shape: tuple[int, ...]  # lead axes (t, c, z as present) + (y, x)
    origins: dict[str, tuple[int, int]]  # well path -> (y, x) of its top-left pixel
    sizes: dict[str, tuple[int, ...]]  # well path -> its array shape at the overview level


def overview_layout(plate: dict, shapes: dict[str, tuple[int, ...]]) -> OverviewLayout:
    cell_h = max(s[-2] for s in shapes.values())
    cell_w = max(s[-1] for s in shapes.values())
    gap_h, gap_w = int(cell_h * MARGIN) + 1, int(cell_w * MARGIN) + 1
    n_rows, n_cols = len(plate["rows"]), len(plate["columns"])
    origins = {}
    for well in plate["wells"]:
        r, c = well["rowIndex"], well["columnIndex"]
        origins[well["path"]] = (r * (cell_h + gap_h) + gap_h // 2, c * (cell_w + gap_w) + gap_w // 2)
    lead = tuple(max(s[i] for s in shapes.values()) for i in range(len(next(iter(shapes.values()))) - 2))
    return OverviewLayout(lead + (n_rows * (cell_h + gap_h), n_cols * (cell_w + gap_w)), origins, dict(shapes))


def overview_fits(wells: list[Any], warn_of: Path | None = None) -> bool:
    """``wells``: reshard's wells. One overview image needs every well on the same channels and time
    points; a sparse plate's wells differ there (each its own plate acquisition), so it has none:
    one warning line."""
    def channels(well: Any) -> list:
        return [ch.get("label") for ch in well.meta.attrs.get("omero", {}).get("channels", [])]

    same = len({(w.lead_shape, tuple(w.meta.axis_names)) for w in wells}) == 1 and \
        all(channels(w) == channels(wells[0]) for w in wells)
    if not same and warn_of is not None:
        warn(warn_of, "wells were imaged with different channels or time points; no plate overview "
                      "(one image needs the same channels in every well)")
    return same
