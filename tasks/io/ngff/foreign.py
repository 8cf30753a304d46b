"""Metadata other tools write that the official schemas reject, coerced on read so zarrmill never
writes it back: ``omero`` channel windows stored as strings (Fractal's converters wrote
``"min": "0"``), colours as numbers, ``active`` as text. Each coercion warns once per store, in
one line naming the file and what changed; values that cannot be coerced are dropped with the
same warning (a viewer then computes its own contrast)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...errors import warn

_warned: set[tuple[str, str]] = set()
WINDOW_KEYS = ("min", "max", "start", "end")


def warn_once(path: Path, what: str) -> None:
    key = (str(path), what)
    if key not in _warned:
        _warned.add(key)
        warn(path, what)


def clean_omero(omero: Any, path: Path) -> dict[str, Any] | None:
    """A copy of ``omero`` the NGFF schemas accept, or None if nothing usable is left."""
    if not isinstance(omero, dict):
        if omero is not None:
            warn_once(path, "omero is not an object; dropped (channels get default display settings)")
        return None
    fixed: list[str] = []
    channels = []
    for channel in omero.get("channels") or []:
        if not isinstance(channel, dict):
            fixed.append("a channel that is not an object")
            continue
        channel = dict(channel)
        window = channel.get("window")
        if window is not None:
            numbers = {k: _number(window.get(k)) if isinstance(window, dict) else None for k in WINDOW_KEYS}
            if any(v is None for v in numbers.values()):
                fixed.append("a window without four numbers (dropped)")
                channel.pop("window")
            else:
                if any(not isinstance(window[k], (int, float)) or isinstance(window[k], bool) for k in WINDOW_KEYS):
                    fixed.append("window values stored as text (now numbers)")
                channel["window"] = numbers
        if "color" in channel and not isinstance(channel["color"], str):
            fixed.append("a colour that is not text (dropped)")
            channel.pop("color")
        if "active" in channel and not isinstance(channel["active"], bool):
            fixed.append("'active' that is not true/false (now true/false)")
            channel["active"] = str(channel["active"]).strip().lower() in ("1", "true", "yes")
        channels.append(channel)
    if fixed:
        warn_once(path, "omero channels had " + ", ".join(sorted(set(fixed)))
                  + "; what zarrmill writes follows the NGFF schema")
    return {**omero, "channels": channels} if channels else None


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() else number
