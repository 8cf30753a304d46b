"""``zarrmill check``: name the kind of an output from its own markers, then hold it to that kind's
contract. zarrmill's kinds: OME-Zarr image, labels, plate, well plate (one image per well with ROI
tables), patch store, compressed ``.b2nd`` and zarr sets, tune results, cluster-check results and
generated instrument folders. A store zarrmill did not write is checked as OME-Zarr, as before.
Unfinished zarrmill steps (from the ledger) are problems of every kind."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from typing import Any, Callable

import numpy as np
import yaml
import zarr

from ...io.storage.location import as_location, zarr_url

from ...io.ngff.conformance import CorruptMetadata, check_store, ngff_version, walk_groups
from ...io.training.store_check import (compress_summary, compressed_format, compressed_set_problems,
                                       patch_store_meta, patch_store_problems)
from ..core.ledger import list_steps
from ..core.provenance import read_provenance

TUNE_FILES = ("tune.csv", "recommended.yaml")


@dataclass
class CheckResult:
    kind: str
    problems: list[str] = field(default_factory=list)
    checked: int = 0  # how many of ``what`` were held to the contract
    what: str = "OME-NGFF groups"

    @property
    def summary(self) -> str:
        return f"{self.kind}, {self.checked} {self.what} checked"


def check_output(root: Path) -> CheckResult:
    root = as_location(root)
    if not root.exists():
        return CheckResult("missing", [f"{root}: does not exist"])
    try:
        result = _by_kind(root)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        # a marker or summary of the wrong shape (hand-edited, truncated): the finding itself
        result = CheckResult("damaged output", [f"{root}: its metadata does not have the shape zarrmill "
                                                f"writes ({type(err).__name__}: {err}); the output is damaged"])
    result.problems += ledger_problems(root)
    return result


def _by_kind(root: Path) -> CheckResult:
    summary = compress_summary(root) if root.is_dir() else None
    if summary is not None:
        fmt = compressed_format(summary)
        result = CheckResult(f"compressed {'.b2nd' if fmt == 'b2nd' else 'zarr'} set",
                             compressed_set_problems(root, summary), len(summary.get("cases", [])), "cases")
        if fmt == "zarr" and not result.problems:  # each case is an OME-Zarr image of its own
            for case in summary.get("cases", []):
                problems, _ = check_store(root / str(case.get("name")))
                result.problems += problems
        return result
    if root.is_dir() and all((root / name).is_file() for name in TUNE_FILES):
        return CheckResult("tune results", tune_problems(root), len(TUNE_FILES), "files")
    meta = patch_store_meta(root)
    if meta is not None:
        return CheckResult("patch store", patch_store_problems(root), int(meta.get("n", 0)), "patches")
    task = _last_task(root)
    if task in NON_ZARR_CHECKS and not _is_zarr(root):
        kind, check, what = NON_ZARR_CHECKS[task]
        problems, checked = check(root)
        return CheckResult(kind, problems, checked, what)
    if _is_array(root):  # what rechunk writes from a bare array: valid as the array it is
        return CheckResult("zarr array", array_problems(root), 1, "arrays")
    problems, checked = check_store(root)
    return CheckResult(ome_kind(root), problems, checked)


def _is_array(root: Path) -> bool:
    if (root / ".zarray").exists():
        return True
    try:
        return json.loads((root / "zarr.json").read_text()).get("node_type") == "array"
    except (OSError, ValueError, AttributeError):
        return False


def array_problems(root: Path) -> list[str]:
    """A bare zarr array opens in zarr-python and its first and last chunks decode."""
    try:
        arr = zarr.open_array(zarr_url(root), mode="r")
        if arr.size:
            np.asarray(arr[(0,) * arr.ndim])
            np.asarray(arr[tuple(n - 1 for n in arr.shape)])
    except Exception as err:  # noqa: BLE001 - whatever zarr-python raises is the finding
        return [f"{root}: zarr-python cannot read the array ({type(err).__name__}: {err})"]
    return []


def _is_zarr(root: Path) -> bool:
    return any((root / name).exists() for name in ("zarr.json", ".zgroup", ".zarray", ".zattrs"))


def _last_task(root: Path) -> str | None:
    prov = read_provenance(root) or {}
    steps = list(prov.get("steps", {}).values())
    return steps[-1].get("task") if steps and isinstance(steps[-1], dict) else None


def ome_kind(root: Path) -> str:
    """What the root group's OME-NGFF metadata makes it."""
    try:
        first = next(iter(walk_groups(root)), None)
    except CorruptMetadata:
        return "zarr store"
    if first is None:
        return "zarr store"
    _, attrs, zarr_format = first
    _, ngff = ngff_version(attrs, zarr_format)
    if "plate" in ngff:
        return "well plate" if _has_roi_tables(root, ngff["plate"]) else "plate"
    for key, kind in (("image-label", "labels"), ("multiscales", "image"), ("well", "well"),
                      ("bioformats2raw.layout", "bioformats2raw container")):
        if key in ngff:
            return kind
    return "zarr store"


def _has_roi_tables(root: Path, plate: dict[str, Any]) -> bool:
    """Every well holds one image with a well ROI table: what reshard and ``ingest layout: well`` write."""
    wells = [w.get("path") for w in plate.get("wells", []) if isinstance(w, dict)]
    for well in wells:
        if not isinstance(well, str):
            return False
        images = [p for p in (root / well).iterdir() if p.is_dir() and not p.name.startswith(".")] \
            if (root / well).is_dir() else []
        if len(images) != 1 or not (images[0] / "tables" / "well_ROI_table").is_dir():
            return False
    return bool(wells)


# -- kinds outside zarr ------------------------------------------------------------------------------
def tune_problems(root: Path) -> list[str]:
    """``tune.csv`` has measured rows; ``recommended.yaml`` is parameters ``compress`` accepts."""
    from ..execution.registry import get_task

    out = []
    try:
        with open(root / "tune.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or any(float(r["patches_per_s"]) <= 0 or float(r["ratio"]) <= 0 for r in rows):
            out.append(f"{root / 'tune.csv'}: no rows, or a row without a positive patches_per_s and ratio")
    except (KeyError, ValueError, TypeError) as err:
        out.append(f"{root / 'tune.csv'}: not the table tune writes ({err})")
    try:
        rec = yaml.safe_load((root / "recommended.yaml").read_text())
        get_task("compress").params_model.model_validate({**rec, "input": "in", "output": "out"})
    except Exception as err:  # noqa: BLE001 - yaml and pydantic errors alike: the file is not usable
        first = str(err).splitlines()[0]
        out.append(f"{root / 'recommended.yaml'}: not parameters compress accepts ({first})")
    return out


def cluster_check_problems(root: Path) -> tuple[list[str], int]:
    """One readable record per unit that ran, as many as the step planned."""
    records = sorted((root / "units").glob("*.json"))
    out = []
    for path in records:
        try:
            json.loads(path.read_text())["host"]
        except (ValueError, KeyError, TypeError):
            out.append(f"{path}: not a unit record")
    planned = sum(rec.n_units for _, rec, _ in list_steps(root) if rec.task == "cluster-check")
    recorded = any(rec.params.get("record", True) for _, rec, _ in list_steps(root))
    if recorded and len(records) != planned:
        out.append(f"{root / 'units'}: {len(records)} unit records, the step planned {planned}")
    return out, len(records)


def instrument_folder_problems(root: Path) -> tuple[list[str], int]:
    """A generated instrument folder reads back through zarrmill's own reader, every file there."""
    from ...errors import ZarrmillError
    from ...io.readers.registry import ReadOptions, detect, reader

    fmt = detect(root)
    if fmt is None:
        return [f"{root}: no instrument metadata that a zarrmill reader recognises"], 0
    try:
        acq = reader(fmt).read(root, ReadOptions())
    except ZarrmillError as err:
        return [str(err)], 0
    from ...io.readers.planes import planes_present

    missing = sorted(set(acq.table.paths(np.flatnonzero(~planes_present(acq.table)))))
    return [f"{m}: listed by the metadata but missing" for m in missing[:5]], len(acq.table)


NON_ZARR_CHECKS: dict[str, tuple[str, Callable[[Path], tuple[list[str], int]], str]] = {
    "cluster-check": ("cluster-check results", cluster_check_problems, "unit records"),
    "generate-plate": ("instrument folder", instrument_folder_problems, "planes"),
}


def ledger_problems(root: Path) -> list[str]:
    """Steps whose run did not finish (killed, failed, or planned only). A plate ``zarrmill follow``
    is converting ("following") is not one: what it lists so far is complete, wells and metadata."""
    return [f"{root}: zarrmill step '{name}' ({rec.task}) is unfinished: {done}/{rec.n_units} units "
            f"done; rerun the workflow to complete it" for name, rec, done in list_steps(root)
            if rec.state not in ("done", "following")]
