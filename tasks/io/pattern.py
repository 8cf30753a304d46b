"""Filename-pattern image series: ``{plate}_{well}_s{field}_w{channel}.tif`` and the like.

Placeholders: ``{well}`` (e.g. B03) or ``{row}`` + ``{col}``, ``{field}``, ``{channel}``, ``{z}``,
``{t}``, ``{plate}``, ``{any}`` (ignored text). Everything else is literal. Field positions come
from a CSV (columns ``well,field,x,y`` in micrometer; optional ``z``), or, without one, fields are
laid out on a grid of ``grid_columns`` (documented fallback: positions then come from the grid,
not the instrument). This covers ImageXpress-style exports and plain folders of tiles."""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from ..errors import ConfigError, InputError, InputNotFoundError
from .acquisition import Acquisition, Channel, Plane, row_index

PLACEHOLDERS = {
    "plate": r".+?", "well": r"[A-Za-z]{1,2}\d{1,3}", "row": r"[A-Za-z]{1,2}", "col": r"\d{1,3}",
    "field": r"\d+", "channel": r"[^_/]+?", "z": r"\d+", "t": r"\d+", "any": r".*?",
}
WELL = re.compile(r"([A-Za-z]{1,2})(\d{1,3})$")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    parts, pos, seen = [], 0, set()
    for m in re.finditer(r"\{(\w+)\}", pattern):
        name = m.group(1)
        if name not in PLACEHOLDERS:
            raise ConfigError(f"pattern {pattern!r}: unknown field {{{name}}}; known: "
                              + ", ".join(f"{{{k}}}" for k in PLACEHOLDERS))
        if name in seen and name != "any":
            raise ConfigError(f"pattern {pattern!r}: {{{name}}} appears twice")
        seen.add(name)
        parts.append(re.escape(pattern[pos:m.start()]))
        parts.append(f"(?P<{name}>{PLACEHOLDERS[name]})" if name != "any" else PLACEHOLDERS["any"])
        pos = m.end()
    parts.append(re.escape(pattern[pos:]))
    if "well" in seen and ({"row", "col"} & seen):
        raise ConfigError(f"pattern {pattern!r}: use either {{well}} or {{row}}{{col}}, not both")
    return re.compile("".join(parts) + r"$")


def _well_rc(groups: dict[str, str]) -> tuple[int, int]:
    if "well" in groups:
        m = WELL.match(groups["well"])
        return row_index(m.group(1)), int(m.group(2))
    if "row" in groups:
        return row_index(groups["row"]), int(groups.get("col", 1))
    return 1, 1  # a plain folder of tiles: one well


def read_positions(path: Path) -> dict[tuple[int, int, int], tuple[float, float, float]]:
    """(row, col, field) -> (x, y, z) um from a CSV with columns well,field,x,y[,z]."""
    if not path.exists():
        raise InputNotFoundError(f"{path}: positions CSV not found")
    out = {}
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"well", "field", "x", "y"} - set(reader.fieldnames or [])
        if missing:
            raise InputError(f"{path}: missing columns {sorted(missing)} (need well,field,x,y[,z])")
        for n, rec in enumerate(reader, start=2):
            try:
                r, c = _well_rc({"well": rec["well"]})
                field = int(rec["field"])
                xyz = (float(rec["x"]), float(rec["y"]), float(rec.get("z") or 0))
            except (ValueError, AttributeError, TypeError) as err:
                raise InputError(f"{path}:{n}: bad row {rec} ({err})") from None
            if not all(math.isfinite(v) for v in xyz):  # would end up in zarr.json as NaN/Infinity
                raise InputError(f"{path}:{n}: position {xyz} is not a finite number (x, y, z in micrometer)")
            out[(r, c, field)] = xyz
    return out


def read_pattern_series(folder: Path, pattern: str, pixel_size_yx: tuple[float, float], z_step: float,
                        positions_csv: Path | None, grid_columns: int, image_shape_yx: tuple[int, int],
                        dtype: str, n_rows: int, n_cols: int, name: str | None) -> Acquisition:
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: folder does not exist")
    regex = compile_pattern(pattern)
    matches = []
    for f in sorted(folder.iterdir()):
        m = regex.match(f.name)
        if m:
            matches.append((f, {k: v for k, v in m.groupdict().items() if v is not None}))
    if not matches:
        raise InputError(f"{folder}: no file matches pattern {pattern!r}")
    channels = sorted({g.get("channel", "0") for _, g in matches}, key=_natural)
    ts = sorted({int(g.get("t", 0)) for _, g in matches})
    zs = sorted({int(g.get("z", 0)) for _, g in matches})
    positions = read_positions(positions_csv) if positions_csv else None
    planes = []
    for f, g in matches:
        row, col = _well_rc(g)
        fld = int(g.get("field", 1))
        x, y, zu = _position(positions, (row, col, fld), grid_columns, image_shape_yx, pixel_size_yx, f)
        planes.append(Plane(row, col, fld, ts.index(int(g.get("t", 0))), channels.index(g.get("channel", "0")),
                            zs.index(int(g.get("z", 0))), str(f.resolve()), x, y, zu))
    return Acquisition(
        name=name or folder.name, planes=planes, channels=[Channel(label=str(c)) for c in channels],
        pixel_size_yx=pixel_size_yx, z_step=z_step, image_shape_yx=image_shape_yx, dtype=dtype,
        n_rows=max(n_rows, max(p.row for p in planes)), n_cols=max(n_cols, max(p.col for p in planes)),
        source=f"{folder}/{pattern}")


def _position(positions, key, grid_columns, shape_yx, px_yx, f) -> tuple[float, float, float]:
    if positions is not None:
        if key not in positions:
            raise InputError(f"{f}: no position for well row {key[0]} col {key[1]} field {key[2]} in the positions CSV")
        return positions[key]
    i = key[2] - 1
    return ((i % grid_columns) * shape_yx[1] * px_yx[1], (i // grid_columns) * shape_yx[0] * px_yx[0], 0.0)


def _natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))
