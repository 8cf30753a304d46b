"""Build CellVoyager folders from the real metadata in tests/data/yokogawa-cv7000, with seeded
synthetic pixels for every listed file (the real data holds no pixels). ``shrink`` rewrites the
mrf's image size so large plates stay small in tests; everything else is the real metadata."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import tifffile
from conftest import DATA

CV = DATA / "yokogawa-cv7000"
FILE = re.compile(r">([^<]+\.(?:tif|png))</bts:MeasurementRecord>")


def cellvoyager_folder(dst: Path, mlf: str, mrf: str, shrink: tuple[int, int] | None = None,
                       seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
    """Folder with MeasurementData.mlf / MeasurementDetail.mrf and one TIFF per listed file.
    Returns (folder, {file name: pixels})."""
    dst.mkdir(parents=True, exist_ok=True)
    mlf_text = (CV / mlf).read_text(encoding="utf-8-sig")
    mrf_text = (CV / mrf).read_text(encoding="utf-8-sig")
    if shrink is not None:
        mrf_text = re.sub(r'HorizontalPixels="\d+"', f'HorizontalPixels="{shrink[1]}"', mrf_text)
        mrf_text = re.sub(r'VerticalPixels="\d+"', f'VerticalPixels="{shrink[0]}"', mrf_text)
    (dst / "MeasurementData.mlf").write_text(mlf_text)
    (dst / "MeasurementDetail.mrf").write_text(mrf_text)
    h = int(re.search(r'VerticalPixels="(\d+)"', mrf_text).group(1))
    w = int(re.search(r'HorizontalPixels="(\d+)"', mrf_text).group(1))
    rng = np.random.default_rng(seed)
    pixels = {}
    for name in FILE.findall(mlf_text):
        img = rng.integers(0, 4000, size=(h, w), dtype=np.uint16)
        tif_name = Path(name).with_suffix(".tif").name
        tifffile.imwrite(dst / tif_name, img)
        pixels[tif_name] = img
    if any(n.endswith(".png") for n in FILE.findall(mlf_text)):
        (dst / "MeasurementData.mlf").write_text(mlf_text.replace(".png<", ".tif<"))
    return dst, pixels


def copy_png_folder(dst: Path) -> Path:
    shutil.copytree(CV / "png", dst)
    return dst
