"""Candidate points for patch extraction: CSV (z,y,x columns, voxels or physical units, optional
label), .npy (N x 3, z,y,x voxels) or the BrainGlobe/cellfinder cell XML (CellCounter markers,
MarkerX/Y/Z in voxels, the marker Type as label). Malformed files are one clear error; bad rows
(NaN) are kept and reported as dropped by the extraction, never a crash in a worker."""
from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import InputError, InputNotFoundError


@dataclass
class Points:
    zyx: np.ndarray  # (N, 3) float64 voxel coordinates at the data resolution
    labels: np.ndarray  # (N,) int64, -1 where none
    ids: np.ndarray  # (N,) int64: row in the input file


def read_points(path: str | Path, unit: str = "voxel", voxel_size: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> Points:
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: points file not found")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        zyx, labels = _npy(path), None
    elif suffix == ".xml":
        zyx, labels = _cellfinder_xml(path)
    elif suffix in {".csv", ".tsv", ".txt"}:
        zyx, labels = _csv(path)
    else:
        raise InputError(f"{path}: unsupported points file (use .csv, .npy or cellfinder .xml)")
    if unit == "physical":
        zyx = zyx / np.asarray(voxel_size, dtype=np.float64)
    n = len(zyx)
    return Points(zyx, labels if labels is not None else np.full(n, -1, np.int64), np.arange(n, dtype=np.int64))


def _npy(path: Path) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001
        raise InputError(f"{path}: not a readable .npy file ({err})") from err
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iuf":
        raise InputError(f"{path}: expected an N x 3 numeric array of z,y,x, found {arr.shape} {arr.dtype}")
    return arr.astype(np.float64)


def _csv(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Comma, tab, semicolon or whitespace separated, a header naming z, y, x (and label). The
    header decides the delimiter for the whole file: a row split another way (decimal commas in a
    space-separated file, a stray comma) is refused naming its line, never read as other points."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (UTF-8) points file") from None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    sep = next((d for d in (",", "\t", ";") if lines and d in lines[0]), None)
    rows = [next(csv.reader([line], delimiter=sep)) if sep else line.split() for line in lines]
    if not rows:
        raise InputError(f"{path}: no header and no points; need columns z, y, x (and optionally label)")
    header = [c.strip().lower() for c in rows[0]]
    missing = [c for c in ("z", "y", "x") if c not in header]
    if missing:
        raise InputError(f"{path}:1: missing columns {missing} in header {rows[0]}; need z, y, x (and optionally label)")
    idx = {c: header.index(c) for c in ("z", "y", "x", "label") if c in header}
    zyx, labels = [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"{path}:{line}: {len(row)} values {row} but the header has {len(header)} columns")
        try:
            zyx.append([float(row[idx[c]]) for c in ("z", "y", "x")])
            label = row[idx["label"]].strip() if "label" in idx else ""
            labels.append(int(float(label)) if label else -1)
        except ValueError:
            raise InputError(f"{path}:{line}: {row} is not numeric z, y, x (and label)") from None
    return np.asarray(zyx, dtype=np.float64).reshape(-1, 3), np.asarray(labels, dtype=np.int64)


def _cellfinder_xml(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from None
    zyx, labels = [], []
    for mtype in root.iter("Marker_Type"):
        try:
            kind = int((mtype.findtext("Type") or "-1").strip())
        except ValueError:
            raise InputError(f"{path}: Marker_Type has Type {mtype.findtext('Type')!r}, not a whole number") from None
        for marker in mtype.iter("Marker"):
            try:
                zyx.append([float(marker.findtext(f"Marker{a}")) for a in "ZYX"])
            except (TypeError, ValueError):
                raise InputError(f"{path}: a Marker of Type {kind} lacks numeric MarkerX/MarkerY/MarkerZ") from None
            labels.append(kind)
    if not zyx and root.find(".//Marker_Data") is None:
        raise InputError(f"{path}: not a cellfinder/CellCounter XML (no Marker_Data)")
    return np.asarray(zyx, dtype=np.float64).reshape(-1, 3), np.asarray(labels, dtype=np.int64)


def write_cellfinder_xml(path: Path, zyx: np.ndarray, labels: np.ndarray) -> None:
    """The same XML layout, for tests and for exporting points (types 1 and 2 as cellfinder uses)."""
    root = ET.Element("CellCounter_Marker_File")
    props = ET.SubElement(root, "Image_Properties")
    ET.SubElement(props, "Image_Filename").text = "placeholder.tif"
    data = ET.SubElement(root, "Marker_Data")
    ET.SubElement(data, "Current_Type").text = "1"
    for kind in sorted(set(int(k) for k in labels)):
        mtype = ET.SubElement(data, "Marker_Type")
        ET.SubElement(mtype, "Type").text = str(kind)
        for (z, y, x), lab in zip(zyx, labels):
            if int(lab) == kind:
                marker = ET.SubElement(mtype, "Marker")
                for tag, v in (("MarkerX", x), ("MarkerY", y), ("MarkerZ", z)):
                    ET.SubElement(marker, tag).text = str(int(round(v)))
    ET.ElementTree(root).write(path)
