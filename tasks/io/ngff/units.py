"""Physical units: every space and time unit the OME-NGFF spec lists (axes ``unit``), and the
symbols OME-XML uses for ``PhysicalSize*Unit``, as factors to micrometer and second. zarrmill
writes micrometer and second; it reads any listed unit and converts where it computes with sizes
(OME-TIFF pixel sizes, patch voxel sizes). An unknown unit is an error naming it, never a silent 1."""
from __future__ import annotations

from ...errors import InputError

_SI = {"yotta": 1e24, "zetta": 1e21, "exa": 1e18, "peta": 1e15, "tera": 1e12, "giga": 1e9, "mega": 1e6,
       "kilo": 1e3, "hecto": 1e2, "deca": 1e1, "": 1.0, "deci": 1e-1, "centi": 1e-2, "milli": 1e-3,
       "micro": 1e-6, "nano": 1e-9, "pico": 1e-12, "femto": 1e-15, "atto": 1e-18, "zepto": 1e-21,
       "yocto": 1e-24}
# NGFF space units, in micrometer (the spec's list: SI prefixes of meter, plus these)
SPACE_UM = {f"{p}meter": f * 1e6 for p, f in _SI.items() if p != "deca"}
SPACE_UM.update({"angstrom": 1e-4, "foot": 304800.0, "inch": 25400.0, "mile": 1609344e3, "parsec": 3.0857e22,
                 "yard": 914400.0})
# NGFF time units, in second
TIME_S = {f"{p}second": f for p, f in _SI.items() if p != "deca"}
TIME_S.update({"minute": 60.0, "hour": 3600.0, "day": 86400.0})
# OME-XML UnitsLength symbols
OME_LENGTH_UM = {"Ym": 1e30, "Zm": 1e27, "Em": 1e24, "Pm": 1e21, "Tm": 1e18, "Gm": 1e15, "Mm": 1e12, "km": 1e9,
                 "hm": 1e8, "dam": 1e7, "m": 1e6, "dm": 1e5, "cm": 1e4, "mm": 1e3, "µm": 1.0, "um": 1.0,
                 "nm": 1e-3, "pm": 1e-6, "fm": 1e-9, "am": 1e-12, "zm": 1e-15, "ym": 1e-18, "Å": 1e-4,
                 "thou": 25.4, "li": 2116.67, "in": 25400.0, "ft": 304800.0, "yd": 914400.0, "mi": 1609344e3,
                 "ua": 1.495978707e17, "ly": 9.4607e21, "pc": 3.0857e22, "pt": 352.778, "pixel": None,
                 "reference frame": None}
OME_LENGTH_UM["\u00b5m"] = OME_LENGTH_UM["\u03bcm"] = 1.0  # micro sign and Greek mu


def ngff_to_micrometer(value: float, unit: str | None, where: str) -> float:
    """A size on a space axis (NGFF ``unit``, none = micrometer by zarrmill's convention) in um."""
    if unit is None:
        return value
    if unit not in SPACE_UM:
        raise InputError(f"{where}: space unit {unit!r} is not an OME-NGFF unit (e.g. micrometer, nanometer, "
                         "millimeter, angstrom); fix the axes metadata")
    return value * SPACE_UM[unit]


def ome_length_to_micrometer(value: float, unit: str | None) -> float | None:
    """None where the unit is not a length (OME's ``pixel``, ``reference frame``) or unknown."""
    factor = OME_LENGTH_UM.get(unit.strip()) if unit else 1.0
    return None if factor is None else value * factor
