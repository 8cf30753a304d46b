"""A multi-position OME-TIFF written with tifffile: three scenes at known stage positions (shared by
tests/test_scenes.py and the reader contract test; needs only tifffile)."""
from __future__ import annotations

import numpy as np
import tifffile

PIXEL = 0.5
POSITIONS = [(100.0, 50.0), (120.0, 50.0), (140.0, 50.0)]  # stage x, y (um): fields 20 um wide, side by side


def scene(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 4000, (2, 3, 24, 40), dtype=np.uint16)  # c, z, y, x


def write_positions(path) -> None:
    with tifffile.TiffWriter(path, ome=True) as tw:
        for i, (x, y) in enumerate(POSITIONS):
            n = 2 * 3
            tw.write(scene(i), metadata={"axes": "CZYX", "PhysicalSizeX": PIXEL, "PhysicalSizeY": PIXEL,
                                         "PhysicalSizeZ": 2.0, "Channel": {"Name": ["DAPI", "GFP"]},
                                         "Plane": {"PositionX": [x] * n, "PositionY": [y] * n,
                                                   "PositionXUnit": ["µm"] * n, "PositionYUnit": ["µm"] * n}})
