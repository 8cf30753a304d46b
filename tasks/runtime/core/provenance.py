"""Provenance in every output store, under one namespaced key (``zarrmill.provenance`` in the root
attributes of a zarr store; a side file in other outputs, see ``provenance_side_file``): zarrmill version,
workflow name, file and hash, host, and per step the task, its parameters, its inputs with sizes
and mtimes, start and end time. ``zarrmill check`` prints it. Each step adds its own entry, so a
plate written by ingest, pyramid and reshard lists all three."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from ... import __version__
from ...io.storage.atomic import atomic_write_json
from ...io.storage.guard import is_bookkeeping_name, provenance_side_file
from ...io.storage.location import as_location, on_disk
from ...io.storage.ozx_path import OzxPath
from ...io.storage.secrets import redact_tree
from ...io.storage.handles import writable_url



def input_record(path: Path) -> dict[str, Any]:
    if on_disk(path) is None:
        return _remote_input_record(path)
    if isinstance(path, OzxPath):  # inside a zipped OME-Zarr: the archive is the file read
        st = path.archive.stat()
        return {"path": str(path), "archive": str(path.archive), "bytes": st.st_size, "mtime": st.st_mtime}
    if not path.exists():
        return {"path": str(path), "exists": False}
    if path.is_file():
        st = path.stat()
        return {"path": str(path.resolve()), "bytes": st.st_size, "mtime": st.st_mtime}
    files = [f for f in path.rglob("*") if f.is_file() and not any(is_bookkeeping_name(p) for p in f.parts)]
    return {"path": str(path.resolve()), "files": len(files), "bytes": sum(f.stat().st_size for f in files),
            "mtime": max((f.stat().st_mtime for f in files), default=0.0)}


def _remote_input_record(path: Any) -> dict[str, Any]:
    """The same summary for an input in a bucket, from one listing (not a request per object)."""
    from ...io.storage.location import key_of, traits_of

    if not traits_of(path).lists:
        return {"path": str(path)}
    try:
        found = path.fs.find(key_of(path), detail=True)
    except FileNotFoundError:
        found = {}
    infos = [i for k, i in found.items() if not any(is_bookkeeping_name(p) for p in k.split("/"))]
    if not infos:
        return {"path": str(path), "exists": False}
    times = [i.get("LastModified") for i in infos if i.get("LastModified") is not None]
    return {"path": str(path), "files": len(infos), "bytes": sum(int(i.get("size") or 0) for i in infos),
            "mtime": max(t.timestamp() for t in times) if times else 0.0}


def _is_zarr_group(root: Path) -> bool:
    if (root / "zarr.json").exists():
        return json.loads((root / "zarr.json").read_text()).get("node_type") == "group"
    return (root / ".zgroup").exists()


def record_step(root: Path, workflow: dict[str, Any], step: dict[str, Any], owner: str | None = None) -> None:
    """Add or replace one step's entry in ``root``'s provenance. ``owner``: the id of the owner
    marker beside a store zarrmill created (the output guard checks the store names it)."""
    root = as_location(root)
    # redacted before the document is written: parameters never hold a secret (contract.py), but
    # a file is where a credential must never land
    step = redact_tree(step)
    entry = redact_tree({"zarrmill": __version__, "host": socket.gethostname(), "workflow": workflow,
                         **({"owner": owner} if owner else {})})
    if _is_zarr_group(root):
        import zarr

        group = zarr.open_group(writable_url(root), mode="a")
        ours = dict(group.attrs.get("zarrmill", {}))
        prov = {**ours.get("provenance", {}), **entry}
        prov["steps"] = {**prov.get("steps", {}), step["step"]: step}
        ours["provenance"] = prov
        group.attrs["zarrmill"] = ours
        return
    target = provenance_side_file(root) if root.is_dir() else root.with_name(root.name + ".provenance.json")
    prov = json.loads(target.read_text()) if target.exists() else {}
    prov.update(entry)
    prov["steps"] = {**prov.get("steps", {}), step["step"]: step}
    atomic_write_json(target, prov)


def read_provenance(root: Path) -> dict[str, Any] | None:
    try:
        return _read_provenance(as_location(root))
    except (OSError, ValueError, AttributeError, TypeError):
        return None  # damaged metadata: zarrmill check reports the file itself


def _read_provenance(root: Path) -> dict[str, Any] | None:
    for meta in (root / "zarr.json", root / ".zattrs"):
        if meta.exists():
            doc = json.loads(meta.read_text())
            attrs = doc.get("attributes", doc) if meta.name == "zarr.json" else doc
            if "provenance" in attrs.get("zarrmill", {}):
                return attrs["zarrmill"]["provenance"]
    side = provenance_side_file(root)
    return json.loads(side.read_text()) if side.exists() else None


def step_entry(step: str, task: str, params: dict[str, Any], inputs: list[Path], started: float) -> dict[str, Any]:
    return {"step": step, "task": task, "params": params, "inputs": [input_record(p) for p in inputs],
            "started": round(started, 3), "ended": round(time.time(), 3)}
