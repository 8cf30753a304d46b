"""Validate written metadata against the official OME-NGFF schemas in tests/data/ngff, loaded here
independently of zarrmill's own checker (one registry of every schema; 0.5 validates the
``attributes`` of zarr.json, 0.4 the ``.zattrs``; 0.6 as its ``ome > version`` says)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from conftest import DATA
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

NGFF = DATA / "ngff"
KIND_SCHEMA = {"multiscales": "image", "plate": "plate", "well": "well", "image-label": "label"}


@lru_cache(maxsize=1)
def official_registry() -> Registry:
    pairs = []
    for path in sorted(NGFF.glob("*/schemas/*.schema")):
        schema = json.loads(path.read_text())
        pairs.append((schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012)))
    return Registry().with_resources(pairs)


def official_validator(version: str, name: str) -> Draft202012Validator:
    schema = json.loads((NGFF / version / "schemas" / f"{name}.schema").read_text())
    return Draft202012Validator(schema, registry=official_registry())


def validate_store(root: Path, strict: bool = False) -> dict[str, int]:
    """Validate every NGFF group under root; returns {schema name: count}; raises on any error."""
    counts: dict[str, int] = {}
    for meta in sorted(Path(root).rglob("zarr.json")) + sorted(Path(root).rglob(".zattrs")):
        if ".zarrmill" in meta.parts:
            continue
        doc = json.loads(meta.read_text())
        if meta.name == "zarr.json":
            if doc.get("node_type") != "group" or "ome" not in doc.get("attributes", {}):
                continue
            ngff = doc["attributes"]["ome"]
            version, data = ("0.6" if str(ngff.get("version", "")).startswith("0.6") else "0.5"), doc["attributes"]
        else:
            version, data, ngff = "0.4", doc, doc
        for key, name in KIND_SCHEMA.items():
            if key in ngff:
                schema = f"strict_{name}" if strict and name in ("image", "plate", "well") else name
                errors = list(official_validator(version, schema).iter_errors(data))
                assert not errors, f"{meta}: {schema} {version}: {[e.message for e in errors[:3]]}"
                counts[name] = counts.get(name, 0) + 1
    assert counts, f"no NGFF metadata found under {root}"
    return counts
