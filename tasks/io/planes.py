"""Read single 2D image files (TIFF, PNG) with one-line errors that name the file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError, InputNotFoundError

PNG = {".png"}


def read_plane(path: str | Path) -> np.ndarray:
    path = Path(path)
    try:
        if path.suffix.lower() in PNG:
            from PIL import Image

            with Image.open(path) as im:
                arr = np.asarray(im)
        else:
            arr = _read_tiff(path)
    except FileNotFoundError as err:
        raise InputNotFoundError(f"{path}: file not found") from err
    except Exception as err:  # noqa: BLE001 - any decoder failure means a corrupt or foreign file
        raise InputError(f"{path}: cannot read image ({type(err).__name__}: {err})") from err
    if arr.size == 0:
        raise InputError(f"{path}: cannot read image (no pixel data: corrupt or truncated file)")
    arr = np.squeeze(arr)
    if arr.ndim != 2:
        raise InputError(f"{path}: expected one 2D plane, found shape {arr.shape}")
    return arr


def _read_tiff(path: Path) -> np.ndarray:
    """Uncompressed, contiguous TIFFs are memory-mapped (no decode copy: 0.9 vs 2.9 ms for a
    1080x1280 uint16 plane); anything else is decoded by tifffile."""
    import tifffile

    try:
        return tifffile.memmap(path, mode="r")
    except (ValueError, OSError, IndexError, TypeError):
        return tifffile.imread(path)


def plane_header(path: str | Path) -> tuple[tuple[int, int], str]:
    """(shape, dtype) from the file header, without decoding pixels."""
    path = Path(path)
    try:
        if path.suffix.lower() in PNG:
            from PIL import Image

            with Image.open(path) as im:
                mode_dtype = {"I;16": "uint16", "I;16B": "uint16", "L": "uint8", "I": "int32", "F": "float32"}
                return (im.size[1], im.size[0]), mode_dtype.get(im.mode, "uint8")
        import tifffile

        with tifffile.TiffFile(path) as tf:
            page = tf.pages[0]
            shape = tuple(s for s in page.shape if s != 1)
            return (shape[-2], shape[-1]), str(page.dtype)
    except FileNotFoundError as err:
        raise InputNotFoundError(f"{path}: file not found") from err
    except Exception as err:  # noqa: BLE001
        raise InputError(f"{path}: cannot read image header ({type(err).__name__}: {err})") from err
