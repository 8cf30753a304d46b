"""``zarrmill check``: validate a store against the official OME-NGFF schemas (0.4, 0.5 or 0.6rc0,
as each group declares) and check what the schemas cannot express: referenced arrays exist, dimensions
match axes, one dtype across levels, level shapes follow the scale factors, well paths match the
plate's rows/columns, shards are whole multiples of chunks; then that ome-zarr-py's Reader opens the
store and each well (tasks/io/ngff/reader_check.py; not for 0.6, which it does not read yet). (Unfinished zarrmill steps are the
runtime's part of ``zarrmill check``.)"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..storage.location import as_location
from ..storage.ozx_path import OzxPath
from typing import Any, Iterator

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from ...errors import InputError
from . import ngff06
from .metadata import transform_values
from .ozx_rules import ozx_problems
from .reader_check import reader_problems

SCHEMA_DIR = Path(__file__).with_name("ngff_schemas")
KINDS = (("multiscales", "image"), ("plate", "plate"), ("well", "well"), ("image-label", "label"),
         ("bioformats2raw.layout", "bf2raw"), ("scene", "scene"))  # scene: 0.6 only
VERSIONS = ("0.4", "0.5", "0.6")


@lru_cache(maxsize=None)
def registry(schema_dir: Path = SCHEMA_DIR) -> Registry:
    """Every schema of every version, by ``$id``, so cross-references resolve offline."""
    resources = []
    for path in sorted(schema_dir.glob("*/*.schema")):
        schema = json.loads(path.read_text())
        # the strict_* schemas carry no $schema key
        resources.append((schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def validator(version: str, name: str, schema_dir: Path = SCHEMA_DIR) -> Draft202012Validator:
    schema = json.loads((schema_dir / version / f"{name}.schema").read_text())
    return Draft202012Validator(schema, registry=registry(schema_dir))


def schema_problems(attrs: dict[str, Any], version: str, name: str, where: str,
                    schema_dir: Path = SCHEMA_DIR) -> list[str]:
    errors = sorted(validator(version, name, schema_dir).iter_errors(attrs), key=lambda e: list(e.path))
    return [f"{where}: NGFF {version} {name} schema: {'/'.join(map(str, e.path)) or '(root)'}: {e.message}"
            for e in errors]


# -- walking a store -------------------------------------------------------------------------------
class CorruptMetadata(ValueError):
    """A metadata file that is not a JSON object (truncated, binary, hand-edited)."""


def _node(path: Path) -> tuple[str, dict[str, Any], int] | None:
    """(node type, attributes, zarr format) or None."""
    if (path / "zarr.json").exists():
        meta = _json(path / "zarr.json")
        return meta.get("node_type", "group"), meta.get("attributes", {}) or {}, 3
    if (path / ".zarray").exists():
        return "array", _json(path / ".zattrs"), 2
    if (path / ".zgroup").exists() or (path / ".zattrs").exists():
        return "group", _json(path / ".zattrs"), 2
    return None


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptMetadata(f"{path}: not valid JSON ({err}); the store is damaged") from None
    if not isinstance(doc, dict):
        raise CorruptMetadata(f"{path}: holds {type(doc).__name__}, not a JSON object; the store is damaged")
    return doc


def walk_groups(root: Path) -> Iterator[tuple[Path, dict[str, Any], int]]:
    node = _node(root)
    if node is None or node[0] != "group":
        return
    yield root, node[1], node[2]
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        yield from walk_groups(child)


def ngff_version(attrs: dict[str, Any], zarr_format: int) -> tuple[str | None, dict[str, Any]]:
    """(declared version, the NGFF attribute dict)."""
    if zarr_format == 3 and "ome" in attrs:
        return ngff06.normalized(attrs["ome"].get("version", "0.5")), attrs["ome"]
    for key in ("multiscales", "plate", "well"):
        if key in attrs:
            value = attrs[key]
            version = (value[0] if isinstance(value, list) and value else value).get("version")
            return (str(version) if version else "0.4"), attrs
    return None, attrs


# -- the check -------------------------------------------------------------------------------------
def check_store(root: Path, schema_dir: Path = SCHEMA_DIR) -> tuple[list[str], int]:
    """(problems, number of NGFF groups checked). A store passes only if it is a zarr group with
    OME-NGFF metadata that the official schemas accept and whose arrays are all there."""
    root = as_location(root)
    archive = ozx_problems(root.archive) if isinstance(root, OzxPath) and not root.inner else []
    try:
        problems, checked = _check(root, schema_dir)
    except CorruptMetadata as err:
        problems, checked = [str(err)], 0
    return archive + problems, checked


def _check(root: Path, schema_dir: Path) -> tuple[list[str], int]:
    node = _node(root)
    if node is None:
        return [f"{root}: not a zarr group (no zarr.json, .zgroup or .zattrs)"], 0
    if node[0] != "group":
        return [f"{root}: a bare zarr array, not an OME-Zarr image or plate"], 0
    problems: list[str] = []
    checked = 0
    for path, attrs, zf in walk_groups(root):
        version, ngff = ngff_version(attrs, zf)
        if version is None:
            continue
        checked += 1
        where = str(path)
        if zf == 3 and "ome" in attrs and "version" not in attrs["ome"]:
            problems.append(f"{where}: zarr.json attributes.ome has no 'version' (OME-Zarr 0.5 requires it)")
        if version not in VERSIONS:
            problems.append(f"{where}: NGFF version {version} is not checked (0.4, 0.5 and 0.6rc0 are)")
            continue
        for key, name in KINDS:
            if key in ngff and (name != "scene" or version == "0.6"):
                problems += schema_problems(ngff if version == "0.4" else attrs, version, name, where, schema_dir)
        if "multiscales" in ngff:
            problems += image_problems(path, ngff["multiscales"])
        if "plate" in ngff:
            problems += plate_problems(path, ngff["plate"])
        if "well" in ngff:
            problems += [f"{where}: well image {im.get('path')} does not exist"
                         for im in ngff["well"].get("images", []) if not _safe_node(path, im.get("path"))]
            problems += well_shape_problems(path, ngff["well"])
    if checked == 0:
        problems.append(f"{root}: no OME-NGFF metadata (no multiscales, plate or well in any group)")
    version, ngff = ngff_version(*_node(root)[1:])
    # valid by the schemas: does it also open in the readers users have? (ome-zarr-py reads neither
    # 0.6 nor a zip archive yet)
    if not problems and version != "0.6" and not isinstance(root, OzxPath):
        wells = [w.get("path", "") for w in ngff.get("plate", {}).get("wells", [])]
        problems += reader_problems(root, wells, whole_plate=not _sparse(root, wells))
    return problems, checked


def _sparse(root: Path, wells: list[str]) -> bool:
    """A plate whose wells come from different plate acquisitions (each well imaged with its own
    channels or time points): viewers that stack every well into one array cannot, by design; each
    well must still open."""
    ids = set()
    for well in wells:
        node = _node(root / well) if _plain_path(well) else None
        images = ngff_version(*node[1:])[1].get("well", {}).get("images", []) if node else []
        ids |= {im.get("acquisition") for im in images if isinstance(im, dict)}
    return len(ids) > 1


def well_shape_problems(path: Path, well: dict[str, Any]) -> list[str]:
    """Plate readers (ome-zarr-py's Reader, napari-ome-zarr) tile a well's images and fail
    ("Shapes do not align") unless every image of the well has the same level-0 shape."""
    shapes: dict[str, list[int]] = {}
    for im in well.get("images", []):
        rel = im.get("path")
        node = _node(path / rel) if _plain_path(rel) else None
        if node is None or node[0] != "group":
            continue
        _, ngff = ngff_version(node[1], node[2])
        datasets = (ngff.get("multiscales") or [{}])[0].get("datasets", [])
        first = datasets[0].get("path") if datasets else None
        if _safe_node(path / rel, first) and _node(path / rel / first)[0] == "array":
            shapes[rel] = _array_meta(path / rel / first, node[2])["shape"]
    if len({tuple(s) for s in shapes.values()}) > 1:
        listed = ", ".join(f"{k} {v}" for k, v in shapes.items())
        return [f"{path}: the well's images differ in shape ({listed}); plate readers (ome-zarr-py, napari) "
                "cannot open such a well: list images of one shape per well"]
    return []


def _plain_path(rel: Any) -> bool:
    return isinstance(rel, str) and bool(rel) and not rel.startswith("/") and ".." not in rel.split("/")


def _safe_node(parent: Path, rel: Any) -> bool:
    """A node exists at ``rel``, a relative path of plain names under ``parent``."""
    return _plain_path(rel) and _node(parent / rel) is not None


def image_problems(path: Path, multiscales: list[dict[str, Any]]) -> list[str]:
    out = []
    for ms in multiscales:
        systems = ms.get("coordinateSystems")  # 0.6: the axes of the system the levels map into
        axes = systems[0].get("axes", []) if isinstance(systems, list) and systems and isinstance(systems[0], dict) \
            else ms.get("axes", [])
        shapes, dtypes, scales = [], set(), []
        for ds in ms.get("datasets", []):
            if not _plain_path(ds.get("path")):
                out.append(f"{path}: dataset path {ds.get('path')!r} is not a relative path inside the image")
                continue
            apath = path / ds["path"]
            node = _node(apath)
            if node is None or node[0] != "array":
                out.append(f"{apath}: array listed in multiscales does not exist")
                continue
            meta = _array_meta(apath, node[2])
            if axes and len(meta["shape"]) != len(axes):
                out.append(f"{apath}: {len(meta['shape'])} dimensions but {len(axes)} axes")
            out += _shard_problems(apath, meta)
            shapes.append(meta["shape"])
            dtypes.add(meta["dtype"])
            cts = ngff06.flat_transforms([ct for ct in ds.get("coordinateTransformations", []) if isinstance(ct, dict)])
            scale = next((ct.get("scale") for ct in cts if ct.get("type") == "scale"), None)
            for ct in cts:
                if isinstance(ct, dict) and ct.get("type") in ("scale", "translation"):
                    try:  # the schemas accept 0, negative and (in JSON) huge numbers; readers do not
                        transform_values(ct.get(ct["type"]), ct["type"], str(apath))
                    except InputError as err:
                        out.append(str(err).replace("; fix the metadata", ""))
                        scale = None
            scales.append(scale)
        if len(dtypes) > 1:
            out.append(f"{path}: levels have different dtypes {sorted(dtypes)}")
        out += _level_shape_problems(path, shapes, scales)
    return out


def _array_meta(apath: Path, zf: int) -> dict[str, Any]:
    if zf == 3:
        meta = json.loads((apath / "zarr.json").read_text())
        chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
        inner = None
        for codec in meta.get("codecs", []):
            if codec.get("name") == "sharding_indexed":
                inner = codec["configuration"]["chunk_shape"]
        return {"shape": meta["shape"], "dtype": str(meta["data_type"]), "chunks": chunks, "inner": inner}
    meta = json.loads((apath / ".zarray").read_text())
    return {"shape": meta["shape"], "dtype": str(meta["dtype"]), "chunks": meta["chunks"], "inner": None}


def _shard_problems(apath: Path, meta: dict[str, Any]) -> list[str]:
    inner = meta["inner"]
    if inner and any(s % c for s, c in zip(meta["chunks"], inner)):
        return [f"{apath}: shard shape {meta['chunks']} is not a whole multiple of chunks {inner}"]
    return []


def _level_shape_problems(path: Path, shapes: list[list[int]], scales: list[Any]) -> list[str]:
    out = []
    if not shapes or any(s is None for s in scales) or len(scales) != len(shapes):
        return out
    base, base_scale = shapes[0], scales[0]
    for level, (shape, scale) in enumerate(zip(shapes[1:], scales[1:]), start=1):
        for axis, (n0, n, s0, s) in enumerate(zip(base, shape, base_scale, scale)):
            factor = s / s0 if s0 else 1.0
            expected = n0 / factor
            if not (int(expected) <= n <= int(expected) + 1):  # floor or ceil of the division
                out.append(f"{path}: level {level} axis {axis} has {n} pixels; scale factor "
                           f"{factor:g} from level 0 ({n0}) expects {expected:g} (rounded)")
    return out


def plate_problems(path: Path, plate: dict[str, Any]) -> list[str]:
    out = []
    rows = [r["name"] for r in plate.get("rows", [])]
    cols = [c["name"] for c in plate.get("columns", [])]
    for well in plate.get("wells", []):
        wpath = well.get("path", "")
        ri, ci = well.get("rowIndex"), well.get("columnIndex")
        if ri is not None and ci is not None and ri < len(rows) and ci < len(cols):
            if wpath != f"{rows[ri]}/{cols[ci]}":
                out.append(f"{path}: well {wpath} has rowIndex {ri} ({rows[ri]}) and columnIndex "
                           f"{ci} ({cols[ci]}), path should be {rows[ri]}/{cols[ci]}")
        if not _safe_node(path, wpath):
            out.append(f"{path}: well {wpath} listed in the plate does not exist")
    return out
