"""``zarrmill check``: validate a store against the official OME-NGFF schemas (0.4 or 0.5, as each
group declares) and check what the schemas cannot express: referenced arrays exist, dimensions
match axes, one dtype across levels, level shapes follow the scale factors, well paths match the
plate's rows/columns, shards are whole multiples of chunks, and no zarrmill step is unfinished."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).with_name("ngff_schemas")
KINDS = (("multiscales", "image"), ("plate", "plate"), ("well", "well"), ("image-label", "label"),
         ("bioformats2raw.layout", "bf2raw"))


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
def _node(path: Path) -> tuple[str, dict[str, Any], int] | None:
    """(node type, attributes, zarr format) or None."""
    if (path / "zarr.json").exists():
        meta = json.loads((path / "zarr.json").read_text())
        return meta.get("node_type", "group"), meta.get("attributes", {}), 3
    if (path / ".zarray").exists():
        return "array", _json(path / ".zattrs"), 2
    if (path / ".zgroup").exists() or (path / ".zattrs").exists():
        return "group", _json(path / ".zattrs"), 2
    return None


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


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
        return str(attrs["ome"].get("version", "0.5")), attrs["ome"]
    for key in ("multiscales", "plate", "well"):
        if key in attrs:
            value = attrs[key]
            version = (value[0] if isinstance(value, list) and value else value).get("version")
            return (str(version) if version else "0.4"), attrs
    return None, attrs


# -- the check -------------------------------------------------------------------------------------
def check_store(root: Path, schema_dir: Path = SCHEMA_DIR) -> tuple[list[str], int]:
    """(problems, number of NGFF groups checked)."""
    root = Path(root)
    if _node(root) is None:
        return [f"{root}: not a zarr group (no zarr.json, .zgroup or .zattrs)"], 0
    problems: list[str] = []
    checked = 0
    for path, attrs, zf in walk_groups(root):
        version, ngff = ngff_version(attrs, zf)
        if version is None:
            continue
        checked += 1
        where = str(path)
        if version not in ("0.4", "0.5"):
            problems.append(f"{where}: NGFF version {version} is not checked (0.4 and 0.5 are)")
            continue
        for key, name in KINDS:
            if key in ngff:
                problems += schema_problems(attrs if version == "0.5" else ngff, version, name, where, schema_dir)
        if "multiscales" in ngff:
            problems += image_problems(path, ngff["multiscales"])
        if "plate" in ngff:
            problems += plate_problems(path, ngff["plate"])
        if "well" in ngff:
            problems += [f"{where}: well image {im['path']} does not exist"
                         for im in ngff["well"].get("images", []) if _node(path / im["path"]) is None]
    problems += ledger_problems(root)
    return problems, checked


def image_problems(path: Path, multiscales: list[dict[str, Any]]) -> list[str]:
    out = []
    for ms in multiscales:
        axes = ms.get("axes", [])
        shapes, dtypes, scales = [], set(), []
        for ds in ms.get("datasets", []):
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
            scales.append(next((ct["scale"] for ct in ds.get("coordinateTransformations", [])
                                if ct["type"] == "scale"), None))
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
        if _node(path / wpath) is None:
            out.append(f"{path}: well {wpath} listed in the plate does not exist")
    return out


def ledger_problems(root: Path) -> list[str]:
    from ..runtime.ledger import list_steps

    return [f"{root}: zarrmill step '{name}' ({rec.task}) is unfinished: {done}/{rec.n_units} units "
            f"done; rerun the workflow to complete it" for name, rec, done in list_steps(root)
            if rec.state != "done"]
