"""Layout of a plate overview: every well's image, at one pyramid level, in a cell at its plate
row/column, so a whole plate is one small image (and a small pyramid)."""
from __future__ import annotations

from dataclasses import dataclass

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
