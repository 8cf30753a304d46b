"""OME-Zarr 0.6 (0.6rc0, RFC-5): coordinate systems and transformations.

zarrmill keeps one picture of an image inside: each level's scale and translation in the space of
whatever holds it (a field's translation is its corner in its well, in micrometres). This module
turns that picture into 0.6 metadata and back:

- An image names one coordinate system, ``physical`` (its axes, with units), and maps each level
  into it with one transformation: ``scale``, or a ``sequence`` of scale and translation when a
  level's pixels are shifted (lower pyramid levels).
- A field of a well keeps its stage position out of its own metadata: the well's ``scene`` has a
  coordinate system ``well`` (the fields' axes) and, for each field, a ``translation`` from that
  field's ``physical`` system to ``well``, in micrometres.
- Reading does the opposite: a field's levels get its well's translation back.

``version`` sits only at ``ome > version`` (not in multiscales, plate, well or labels)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import InputError

WRITTEN = "0.6rc0"  # the only 0.6 version string the 0.6rc0 schemas accept
SYSTEM = "physical"
WELL_SYSTEM = "well"


def normalized(version: Any) -> str:
    """'0.6rc0', '0.6.dev3', '0.6' -> '0.6'; other versions as they are."""
    text = str(version)
    return "0.6" if text.startswith("0.6") else text


def written(version: str) -> str:
    """The version string written into ``ome > version``."""
    return WRITTEN if version == "0.6" else version


def _round(values: list[float]) -> list[float]:
    return [float(round(v, 9)) for v in values]


def dataset(path: str, scale: list[float], translation: list[float] | None) -> dict[str, Any]:
    """One level: a single transformation from its array to ``physical``."""
    io = {"input": {"path": path}, "output": {"name": SYSTEM}}
    if translation is None or not any(translation):
        return {"path": path, "coordinateTransformations": [{"type": "scale", "scale": _round(scale), **io}]}
    return {"path": path, "coordinateTransformations": [{
        "type": "sequence", **io, "transformations": [
            {"type": "scale", "scale": _round(scale)},
            {"type": "translation", "translation": _round(translation)}]}]}


def multiscale(axes: list[dict[str, Any]], levels: list[Any], name: str, placed: bool) -> dict[str, Any]:
    """The multiscale of an image. ``placed``: the image sits in a well, whose scene holds level 0's
    translation (subtracted here from every level)."""
    origin = list(levels[0].translation or [0.0] * len(axes)) if placed else [0.0] * len(axes)
    datasets = []
    for lv in levels:
        shift = [t - o for t, o in zip(lv.translation, origin)] if lv.translation is not None else None
        datasets.append(dataset(lv.path, lv.scale, shift))
    return {"name": name, "coordinateSystems": [{"name": SYSTEM, "axes": axes}], "datasets": datasets}


def well_scene(axes: list[dict[str, Any]], offsets: dict[str, list[float]]) -> dict[str, Any]:
    """The well's coordinate system and each image's translation into it (micrometres)."""
    return {"coordinateSystems": [{"name": WELL_SYSTEM, "axes": axes}],
            "coordinateTransformations": [{
                "type": "translation", "name": f"{image} to well",
                "input": {"path": image, "name": SYSTEM}, "output": {"name": WELL_SYSTEM},
                "translation": _round(offset)} for image, offset in offsets.items()]}


# -- reading ---------------------------------------------------------------------------------------
def axes_of(ms: dict[str, Any], where: str) -> list[Any]:
    """The axes of the coordinate system the levels map into (the first one when they do not say)."""
    systems = ms.get("coordinateSystems")
    if not isinstance(systems, list) or not systems or not all(isinstance(s, dict) for s in systems):
        raise InputError(f"{where}: an OME-Zarr 0.6 multiscales needs coordinateSystems (a list of objects); "
                         "fix the metadata")
    target = None
    for ds in ms.get("datasets") or []:
        cts = ds.get("coordinateTransformations") if isinstance(ds, dict) else None
        if isinstance(cts, list) and cts and isinstance(cts[0], dict):
            target = (cts[0].get("output") or {}).get("name")
            break
    chosen = next((s for s in systems if s.get("name") == target), systems[0])
    axes = chosen.get("axes")
    if not isinstance(axes, list):
        raise InputError(f"{where}: coordinate system {chosen.get('name')!r} has no axes list; fix the metadata")
    return axes


def flat_transforms(cts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A dataset's transformations with a ``sequence`` unrolled (0.4/0.5 list them flat); an
    ``identity`` is a scale of ones for the caller (nothing to apply)."""
    out: list[dict[str, Any]] = []
    for ct in cts:
        if ct.get("type") == "sequence" and isinstance(ct.get("transformations"), list):
            out += flat_transforms([t for t in ct["transformations"] if isinstance(t, dict)])
        else:
            out.append(ct)
    return out


def scene_offset(image: Path, read_attrs: Any) -> list[float] | None:
    """The translation a 0.6 well's scene gives the image at ``image`` (a field, or a label of one:
    ``field/labels/name``), or None."""
    candidates = [(image.parent, image.name)]
    if image.parent.name == "labels":
        candidates.append((image.parent.parent.parent, image.parent.parent.name))
    for well, name in candidates:
        try:
            attrs, _ = read_attrs(well)
        except (InputError, OSError):
            continue
        scene = attrs.get("scene") if isinstance(attrs, dict) and "well" in attrs else None
        for ct in (scene or {}).get("coordinateTransformations") or []:
            if (isinstance(ct, dict) and ct.get("type") == "translation"
                    and (ct.get("input") or {}).get("path") == name and isinstance(ct.get("translation"), list)):
                return [float(v) for v in ct["translation"]]
    return None
