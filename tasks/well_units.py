"""The units of a plate's well images (reshard, and ingest with ``layout: well``): a region of a
well's level 0 composed from its FOVs, and a region of the plate overview composed from the wells.
The pyramid levels read back from the level above are ``pyramid.LevelUnit``."""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any

from .runtime.core.units import Region, TypedUnit


@dataclass(frozen=True, kw_only=True)
class ComposeUnit(TypedUnit):
    """``region`` of well ``well``'s level 0, painted from ``fovs`` (each: path, pixel, size and
    what the reader needs: a level path, or an instrument's plane files); ``levels`` below it are
    built from it in memory (pyramid.plan_levels_in_memory)."""

    well: str
    region: Region
    fovs: list[dict[str, Any]]
    levels: list[dict[str, Any]] = dataclass_field(default_factory=list)
    missing_ok: bool = False  # an instrument's missing plane file reads as zeros


@dataclass(frozen=True, kw_only=True)
class OverviewUnit(TypedUnit):
    """``region`` of the plate overview's level 0, painted from the wells in ``fovs``."""

    region: Region
    fovs: list[dict[str, Any]]
