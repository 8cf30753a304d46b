"""Convert an instrument folder with Fractal's converters (fractal-uzh-converters), through their
public API. Runs in the peers' own venv (their ngio pin clashes with ours):

    <peers python> tests/peers/fractal_convert.py <format> <folder> <zarr dir> [layout]

format: cq, operetta, scanr, hcsai (scanR needs its plate layout, e.g. 96-well). Prints one JSON
line: the plates it wrote. zarrmill's tests call it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import fractal_uzh_converters as fuc
from ome_zarr_converters_tools import SequentialRunner


def main() -> None:
    fmt, folder, zarr_dir = sys.argv[1:4]
    extra = {"layout": sys.argv[4]} if len(sys.argv) > 4 else {}
    convert, model = {"cq": (fuc.convert_cq3k, fuc.CQ3KAcquisitionModel),
                      "operetta": (fuc.convert_operetta, fuc.OperettaAcquisitionModel),
                      "scanr": (fuc.convert_scanr, fuc.ScanRAcquisitionModel),
                      "hcsai": (fuc.convert_imagexpress_hcs, fuc.MDImageXpressHCSaiAcquisitionModel)}[fmt]
    convert(zarr_dir=zarr_dir, runner=SequentialRunner(),
            acquisitions=[model(path=folder, plate_name="plate", **extra)])
    print(json.dumps({"plates": sorted(str(p) for p in Path(zarr_dir).glob("*.zarr"))}))


if __name__ == "__main__":
    main()
