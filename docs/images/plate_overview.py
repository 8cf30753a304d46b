"""Draws docs/images/plate-overview.png, the picture on the manual's home page and in the README:
the plate overview zarrmill writes for the demo (reshard ``overview: true``), channels coloured by the
omero metadata it wrote. Run after ``zarrmill run workflows/demo.yaml --set vars.out=DIR``:

    python docs/images/plate_overview.py DIR/wells.ome.zarr docs/images/plate-overview.png
"""
import sys

import numpy as np
import zarr
from PIL import Image

MARGIN, ZOOM = 24, 2


def main(store: str, out: str) -> None:
    group = zarr.open_group(f"{store}/overview", mode="r")
    ome = group.attrs["ome"]
    pixels = np.asarray(group[ome["multiscales"][0]["datasets"][0]["path"]])[:, 0]  # (c, y, x)
    rgb = np.zeros(pixels.shape[1:] + (3,), np.float32)
    for plane, channel in zip(pixels, ome["omero"]["channels"]):
        window = channel["window"]
        scaled = np.clip((plane - window["start"]) / (window["end"] - window["start"]), 0, 1)
        colour = np.array([int(channel["color"][i:i + 2], 16) / 255 for i in (0, 2, 4)], np.float32)
        rgb += scaled[..., None] * colour
    ys, xs = np.nonzero(pixels.max(axis=0))  # the imaged wells, with a margin (the plate is mostly empty)
    y0, y1 = max(ys.min() - MARGIN, 0), ys.max() + MARGIN
    x0, x1 = max(xs.min() - MARGIN, 0), xs.max() + MARGIN
    image = Image.fromarray((np.clip(rgb[y0:y1, x0:x1], 0, 1) * 255).astype(np.uint8))
    image.resize((image.width * ZOOM, image.height * ZOOM), Image.NEAREST).save(out, optimize=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
