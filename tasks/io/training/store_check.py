"""The contracts of the training outputs, for ``zarrmill check``: a patch store (what
``patch-extract`` writes and ``PatchDataset`` reads) and a compressed set (what ``compress`` writes:
``.b2nd`` files or a zarr store of OME-Zarr images, with ``zarrmill-compress.json``). Each function
returns every problem found, one line each; an empty list means the output keeps its contract."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..storage.location import as_location, zarr_url
from ..storage.transfer import local_copy
from .patch_table import PATCH_STATUS, TABLE_COLUMNS

# a .b2nd set keeps its summary in zarrmill/ (nnU-Net takes every top-level file for a case);
# a zarr set in its root attributes (zarr-python warns about any file that is not a zarr node)
COMPRESS_SUMMARY = "zarrmill/compress.json"
SUMMARY_ATTR = "compress_set"


def _ours(attrs: Any) -> dict[str, Any]:
    """The ``zarrmill`` attributes of a group, {} when absent or not an object (hand-edited)."""
    ours = attrs.get("zarrmill") if isinstance(attrs, dict) else None
    return ours if isinstance(ours, dict) else {}


def patch_store_meta(root: Path) -> dict[str, Any] | None:
    """The ``zarrmill.patch_store`` attributes of a zarr group, or None."""
    for name in ("zarr.json", ".zattrs"):
        path = as_location(root) / name
        if path.is_file():
            try:
                doc = json.loads(path.read_text())
            except (ValueError, UnicodeDecodeError):
                return None
            attrs = doc.get("attributes", {}) if name == "zarr.json" and isinstance(doc, dict) else doc
            meta = _ours(attrs).get("patch_store")
            return meta if isinstance(meta, dict) else None
    return None


def patch_store_problems(root: Path) -> list[str]:
    root = as_location(root)
    meta = patch_store_meta(root) or {}
    if not meta.get("complete"):
        return [f"{root}: patch store is not complete (patch-extract did not finish); rerun it"]
    try:
        patches = zarr.open_array(zarr_url(root / "patches"), mode="r")
        table = {k: zarr.open_array(zarr_url(root / "table" / k), mode="r")[...] for k in TABLE_COLUMNS}
    except (FileNotFoundError, KeyError, ValueError) as err:
        return [f"{root}: patch store misses its patches array or table columns ({err})"]
    out: list[str] = []
    n = int(meta.get("n", -1))
    size = [int(v) for v in meta.get("patch_size", [])]
    if patches.shape[0] != n or list(patches.shape[2:]) != size:
        out.append(f"{root}/patches: shape {list(patches.shape)} does not hold {n} patches of {size} "
                   "as the store's attributes record")
    out += [f"{root}/table/{k}: {len(v)} rows, not {n}" for k, v in table.items() if len(v) != n]
    status = table["status"]
    if status.size and (status.min() < 0 or status.max() >= len(PATCH_STATUS)):
        out.append(f"{root}/table/status: values outside 0..{len(PATCH_STATUS) - 1}")
    kept = int((status == 0).sum())
    if kept != meta.get("kept") or n - kept != meta.get("dropped"):
        out.append(f"{root}: attributes say {meta.get('kept')} kept and {meta.get('dropped')} dropped; the table "
                   f"has {kept} kept and {n - kept} dropped")
    if not out:
        out += _dataset_problems(root, kept, [patches.shape[1]] + size)
    return out


def _dataset_problems(root: Path, kept: int, item_shape: list[int]) -> list[str]:
    from .patch_dataset import PatchDataset

    try:
        ds = PatchDataset(root, dtype=None)
        if len(ds) != kept:
            return [f"{root}: PatchDataset lists {len(ds)} patches, the table {kept} kept"]
        for i in sorted({0, len(ds) - 1}) if len(ds) else []:
            if list(ds[i].shape) != item_shape:
                return [f"{root}: PatchDataset item {i} has shape {list(ds[i].shape)}, not {item_shape}"]
    except (ValueError, OSError, KeyError) as err:
        return [f"{root}: PatchDataset cannot read it ({err})"]
    return []


# -- compressed sets ---------------------------------------------------------------------------------
def compress_summary(root: Path) -> dict[str, Any] | None:
    """The summary compress writes: ``zarrmill/compress.json`` of a .b2nd set, or the
    ``zarrmill.compress_set`` attributes of a zarr set; None if neither is there."""
    path = as_location(root) / COMPRESS_SUMMARY
    if not path.is_file():
        if (as_location(root) / "zarr.json").is_file():
            try:
                attrs = json.loads((as_location(root) / "zarr.json").read_text()).get("attributes", {})
            except (ValueError, UnicodeDecodeError, AttributeError):
                return None
            doc = _ours(attrs).get(SUMMARY_ATTR)
            return doc if isinstance(doc, dict) else None
        return None
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        return {"damaged": True}
    return doc if isinstance(doc, dict) else {"damaged": True}


def compressed_format(summary: dict[str, Any]) -> str:
    if summary.get("format") in ("b2nd", "zarr"):
        return summary["format"]
    outputs = [str(c.get("output", "")) for c in summary.get("cases", []) if isinstance(c, dict)]
    return "b2nd" if outputs and all(o.endswith(".b2nd") for o in outputs) else "zarr"


def compressed_set_problems(root: Path, summary: dict[str, Any]) -> list[str]:
    """Every case listed is there, opens, has the recorded shape and dtype and (``.b2nd``) the
    chunks and blocks its own metadata records; every chunk decodes (one at a time)."""
    root = as_location(root)
    if summary.get("damaged"):
        return [f"{root / COMPRESS_SUMMARY}: not valid JSON; the set is damaged"]
    if summary.get("state") != "done":
        return [f"{root}: compress did not finish ({COMPRESS_SUMMARY} says {summary.get('state')!r}); rerun it"]
    cases = [c for c in summary.get("cases", []) if isinstance(c, dict)]
    if not cases:
        return [f"{root / COMPRESS_SUMMARY}: lists no cases"]
    fmt = compressed_format(summary)
    out: list[str] = []
    for case in cases:
        name = str(case.get("name", ""))
        path = root / (f"{name}.b2nd" if fmt == "b2nd" else name)
        if not name or "/" in name or name.startswith("."):
            out.append(f"{root / COMPRESS_SUMMARY}: case name {name!r} is not a plain name")
        elif not path.exists():
            out.append(f"{path}: listed in {COMPRESS_SUMMARY} but missing")
        else:
            out += _case_problems(path, case, fmt)
    if fmt == "b2nd":
        listed = {f"{c.get('name')}.b2nd" for c in cases}
        out += [f"{p}: a .b2nd file {COMPRESS_SUMMARY} does not list" for p in sorted(root.glob("*.b2nd"))
                if p.name not in listed]
    return out


def _case_problems(path: Path, case: dict[str, Any], fmt: str) -> list[str]:
    if fmt != "b2nd":
        return _local_case_problems(path, case, fmt)
    with local_copy(path, prefix="zarrmill-check-") as local:  # memory-mapped, as training workers read it
        return [line.replace(str(local), str(path)) for line in _local_case_problems(local, case, fmt)]


def _local_case_problems(path: Path, case: dict[str, Any], fmt: str) -> list[str]:
    from .b2store import PatchArray

    try:
        arr = PatchArray(path / "0" if fmt == "zarr" else path)
        out = []
        if list(arr.shape) != list(case.get("shape", [])) or str(arr.dtype) != str(case.get("dtype")):
            out.append(f"{path}: {list(arr.shape)} {arr.dtype}, but {COMPRESS_SUMMARY} records "
                       f"{case.get('shape')} {case.get('dtype')}")
        meta = arr.meta
        if fmt == "b2nd" and meta:
            if list(arr.chunks) != list(meta.get("chunks", arr.chunks)):
                out.append(f"{path}: chunks {list(arr.chunks)}, its metadata records {meta.get('chunks')}")
            if meta.get("blocks") and arr.blocks and list(arr.blocks) != list(meta["blocks"]):
                out.append(f"{path}: blocks {list(arr.blocks)}, its metadata records {meta.get('blocks')}")
        for index in np.ndindex(*[-(-s // c) for s, c in zip(arr.shape, arr.chunks)]):
            arr[tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, arr.chunks, arr.shape))]
        return out  # every chunk decoded, one at a time: a damaged one raises above
    except Exception as err:  # noqa: BLE001 - any failure to open or decode is the finding itself
        return [f"{path}: cannot be read ({type(err).__name__}: {err})"]
