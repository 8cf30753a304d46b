"""Convert a CellVoyager measurement folder with Fractal's converter (fractal-uzh-converters),
through its public API. Runs in the peers' own venv (their ngio pin clashes with ours):

    <peers python> tests/peers/fractal_cellvoyager.py <measurement folder> <zarr dir> [processes]

Prints one JSON line: the plate path it wrote. zarrmill's tests and benchmarks call it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fractal_uzh_converters import CellVoyagerAcquisitionModel, convert_cellvoyager
from ome_zarr_converters_tools import MultiprocessingRunner, SequentialRunner


def main() -> None:
    folder, zarr_dir = sys.argv[1], sys.argv[2]
    processes = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    runner = MultiprocessingRunner(num_processes=processes) if processes > 1 else SequentialRunner()
    images = convert_cellvoyager(zarr_dir=zarr_dir, runner=runner,
                                 acquisitions=[CellVoyagerAcquisitionModel(path=folder, plate_name="plate")])
    updates = [u for item in images for u in (item.get("image_list_updates") or [item])]
    print(json.dumps({"plates": sorted(str(p) for p in Path(zarr_dir).glob("*.zarr")),
                      "images": sorted(u["zarr_url"] for u in updates if "zarr_url" in u)}))


if __name__ == "__main__":
    main()
