"""Filename-pattern image series: ``{plate}_{well}_s{field}_w{channel}.tif`` and the like.

Placeholders: ``{well}`` (e.g. B03) or ``{row}`` + ``{col}``, ``{field}``, ``{channel}``, ``{z}``,
``{t}``, ``{plate}``, ``{any}`` (ignored text). Everything else is literal. A placeholder can say
how it is written: a width (``{field:2}``: exactly two digits, so a UUID that follows is not
swallowed) or a regular expression (``{well:[A-P][0-9]{2}}``). Folder parts are patterns too
(``TimePoint_{t}/ZStep_{z}/{well}_s{field}_w{channel}.tif``); no placeholder crosses a ``/``.

Every field of view must have every channel, z and time point the series has: a missing plane is an
error listing the missing planes (``missing: zeros`` fills them with zeros and records them), and
two files for one plane is an error naming both. Field positions come from a CSV (columns
``well,field,x,y`` in micrometer; optional ``z``), or, without one, fields are laid out on a grid of
``grid_columns`` (documented fallback: positions then come from the grid, not the instrument)."""
from __future__ import annotations

import csv
import math
import re
from itertools import product
from pathlib import Path

from ...errors import ConfigError, InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition, Channel, Plane, row_index, row_name

PLACEHOLDERS = {
    "plate": r"[^/]+?", "well": r"[A-Za-z]{1,2}\d{1,3}", "row": r"[A-Za-z]{1,2}", "col": r"\d{1,3}",
    "field": r"\d+", "channel": r"[^_/]+?", "z": r"\d+", "t": r"\d+", "any": r"[^/]*?",
}
NUMERIC = {"field", "z", "t", "col"}
WELL = re.compile(r"([A-Za-z]{1,2})(\d{1,3})$")
MISSING_PREFIX = "<missing plane: "  # stands in for a file the series lacks (never exists on disk)


def _placeholders(pattern: str) -> list[tuple[int, int, str, str | None]]:
    """(start, end, name, spec) of each ``{name}`` / ``{name:spec}``; a spec may hold braces
    (``{well:[A-P][0-9]{2}}``), so this counts them instead of using one regular expression."""
    out, i = [], 0
    while True:
        start = pattern.find("{", i)
        if start < 0:
            return out
        depth, j = 0, start
        while j < len(pattern):
            depth += {"{": 1, "}": -1}.get(pattern[j], 0)
            if depth == 0:
                break
            j += 1
        if depth:
            raise ConfigError(f"pattern {pattern!r}: a '{{' at position {start} is never closed")
        name, _, spec = pattern[start + 1:j].partition(":")
        out.append((start, j + 1, name, spec if _ else None))
        i = j + 1


def _regex_for(pattern: str, name: str, spec: str | None) -> str:
    if spec is None:
        return PLACEHOLDERS[name]
    if spec.isdigit() and int(spec) > 0:
        return (r"\d" if name in NUMERIC else r"[^/]") + f"{{{int(spec)}}}"
    if "(?P" in spec or "/" in spec:
        raise ConfigError(f"pattern {pattern!r}: {{{name}:{spec}}} may not name groups or match '/'")
    try:
        re.compile(spec)
    except re.error as err:
        raise ConfigError(f"pattern {pattern!r}: {{{name}:{spec}}} is not a regular expression ({err})") from None
    return f"(?:{spec})"


def compile_pattern(pattern: str) -> re.Pattern[str]:
    parts, pos, seen = [], 0, set()
    for start, end, name, spec in _placeholders(pattern):
        if name not in PLACEHOLDERS:
            raise ConfigError(f"pattern {pattern!r}: unknown field {{{name}}}; known: "
                              + ", ".join(f"{{{k}}}" for k in PLACEHOLDERS))
        if name in seen and name != "any":
            raise ConfigError(f"pattern {pattern!r}: {{{name}}} appears twice")
        seen.add(name)
        parts.append(re.escape(pattern[pos:start]))
        body = _regex_for(pattern, name, spec)
        parts.append(f"(?P<{name}>{body})" if name != "any" else body)
        pos = end
    parts.append(re.escape(pattern[pos:]))
    if "well" in seen and ({"row", "col"} & seen):
        raise ConfigError(f"pattern {pattern!r}: use either {{well}} or {{row}}{{col}}, not both")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ConfigError(f"pattern {pattern!r}: folder parts are relative to input and may not use '..'")
    return re.compile("".join(parts) + r"$")


def pattern_files(folder: Path, pattern: str) -> list[tuple[Path, dict[str, str]]]:
    """Files under ``folder`` whose path relative to it matches; sorted, links not followed out."""
    regex = compile_pattern(pattern)
    depth = pattern.count("/")
    found = []
    for f in sorted(folder.rglob("*") if depth else folder.iterdir()):
        rel = f.relative_to(folder).as_posix()
        if rel.count("/") != depth or not f.is_file():
            continue
        m = regex.match(rel)
        if m:
            found.append((f, {k: v for k, v in m.groupdict().items() if v is not None}))
    return found


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
    matches = pattern_files(folder, pattern)
    if not matches:
        hint = " (its folder parts too)" if "/" in pattern else ""
        raise InputError(f"{folder}: no file matches pattern {pattern!r}{hint}")
    channels = sorted({g.get("channel", "0") for _, g in matches}, key=_natural)
    ts = sorted({int(g.get("t", 0)) for _, g in matches})
    zs = sorted({int(g.get("z", 0)) for _, g in matches})
    positions = read_positions(positions_csv) if positions_csv else None
    planes: dict[tuple[int, int, int, int, int, int], Plane] = {}
    for f, g in matches:
        row, col = _well_rc(g)
        fld = int(g.get("field", 1))
        x, y, zu = _position(positions, (row, col, fld), grid_columns, image_shape_yx, pixel_size_yx, f)
        plane = Plane(row, col, fld, ts.index(int(g.get("t", 0))), channels.index(g.get("channel", "0")),
                      zs.index(int(g.get("z", 0))), str(f.resolve()), x, y, zu)
        key = (row, col, fld, plane.t, plane.c, plane.z)
        if key in planes:
            raise InputError(f"{folder}: {Path(planes[key].path).name} and {f.name} are the same plane (well "
                             f"{_well_name(row, col)}, field {fld}, channel {channels[plane.c]}, z {zs[plane.z]}, "
                             f"t {ts[plane.t]}); remove one or make the pattern tell them apart")
        planes[key] = plane
    for (row, col, fld), (t, c, z) in product({k[:3] for k in planes}, product(range(len(ts)), range(len(channels)),
                                                                         range(len(zs)))):
        if (row, col, fld, t, c, z) not in planes:  # a stand-in file that does not exist: error or zeros later
            some = next(pl for k, pl in planes.items() if k[:3] == (row, col, fld))
            stand_in = (f"{MISSING_PREFIX}well {_well_name(row, col)} field {fld} channel {channels[c]} "
                        f"z {zs[z]} t {ts[t]}>")
            planes[(row, col, fld, t, c, z)] = Plane(row, col, fld, t, c, z, str(folder / stand_in),
                                                     some.x_um, some.y_um, some.z_um)
    ordered = [planes[k] for k in sorted(planes)]
    return Acquisition(
        name=name or folder.name, planes=ordered, channels=[Channel(label=str(c)) for c in channels],
        pixel_size_yx=pixel_size_yx, z_step=z_step, image_shape_yx=image_shape_yx, dtype=dtype,
        n_rows=max(n_rows, max(p.row for p in ordered)), n_cols=max(n_cols, max(p.col for p in ordered)),
        source=f"{folder}/{pattern}")


def _well_name(row: int, col: int) -> str:
    return f"{row_name(row)}{col:02d}"


def _position(positions, key, grid_columns, shape_yx, px_yx, f) -> tuple[float, float, float]:
    if positions is not None:
        if key not in positions:
            raise InputError(f"{f}: no position for well row {key[0]} col {key[1]} field {key[2]} in the positions CSV")
        return positions[key]
    i = key[2] - 1
    return ((i % grid_columns) * shape_yx[1] * px_yx[1], (i // grid_columns) * shape_yx[0] * px_yx[0], 0.0)


def _natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))
