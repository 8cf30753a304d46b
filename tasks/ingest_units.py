"""The units of ``ingest`` that write level 0 (a layout-well plate's are well_units.py; the levels
read back from the level above are ``pyramid.LevelUnit``)."""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any

from .runtime.core.units import Region, TypedUnit

Plane = list[Any]  # [t, c, z, path of the plane's file]


@dataclass(frozen=True, kw_only=True)
class FieldUnit(TypedUnit):
    """One field of view at time point ``t``, written plane file by plane file (no pyramid)."""

    field: str
    t: int
    planes: list[Plane]
    has_t: bool
    missing_ok: bool = False  # a missing plane file reads as zeros


@dataclass(frozen=True, kw_only=True)
class FieldRegionUnit(TypedUnit):
    """One region of a field's level 0, assembled from the plane files inside it, and the
    ``levels`` below it built from it in memory (pyramid: true)."""

    field: str
    region: Region
    planes: list[Plane]
    levels: list[dict[str, Any]] = dataclass_field(default_factory=list)
    missing_ok: bool = False


@dataclass(frozen=True, kw_only=True)
class ImageRegionUnit(TypedUnit):
    """One region of a single image file's level 0, and the levels built from it in memory."""

    region: Region
    levels: list[dict[str, Any]] = dataclass_field(default_factory=list)
