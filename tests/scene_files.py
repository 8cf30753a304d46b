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


CZI_SHAPE = (2, 24, 32)  # c, y, x per scene
CZI_PIXEL = 0.5


def czi_scene(i: int) -> np.ndarray:
    return np.random.default_rng(100 + i).integers(0, 4000, CZI_SHAPE, dtype=np.uint16)


def write_czi_plate(path, scenes: list[tuple[str, int, int]]) -> None:
    """A CZI plate written with Zeiss's own writer (pylibCZIrw): one scene per entry (name, carrier
    row, carrier column), each at its own stage place; then the scene list ZEN writes for a carrier
    (Scene Name, Shape Name, Shape RowIndex and ColumnIndex counting from 1, as a Celldiscoverer 7
    names the scene of row 4, column 6 "D6") added with the same library's metadata editor."""
    from pylibCZIrw import czi as pyczi

    with pyczi.create_czi(str(path), exist_ok=True) as czi:
        for s in range(len(scenes)):
            for c in range(CZI_SHAPE[0]):
                czi.write(czi_scene(s)[c], plane={"C": c, "Z": 0, "T": 0}, scene=s, location=(200 * s, 0))
        czi.write_metadata("plate", channel_names={0: "DAPI", 1: "GFP"}, scale_x=CZI_PIXEL * 1e-6,
                           scale_y=CZI_PIXEL * 1e-6)
    listed = "".join(f'<Scene Index="{s}" Name="{name}"><Shape Name="{name}"><ColumnIndex>{col}</ColumnIndex>'
                     f'<RowIndex>{row}</RowIndex></Shape><ArrayName>Carrier</ArrayName></Scene>'
                     for s, (name, row, col) in enumerate(scenes))
    # bioio-czi's OME conversion needs each channel's acquisition mode and the image's bit count
    # (ZEN always writes both)
    mode = "<AcquisitionMode>WideField</AcquisitionMode><IlluminationType>Epifluorescence</IlluminationType>"
    with pyczi.edit_czi(str(path)) as editor:
        with editor.edit_session() as builder:
            xml = builder.get_xml()
            xml = xml.replace("</PixelType></Channel>", "</PixelType>" + mode + "</Channel>")
            xml = xml.replace("</Dimensions><PixelType>Gray16</PixelType>",
                              "</Dimensions><PixelType>Gray16</PixelType><ComponentBitCount>16</ComponentBitCount>")
            builder.set_xml(xml.replace("</Channels>", f"</Channels><S><Scenes>{listed}</Scenes></S>", 1))
