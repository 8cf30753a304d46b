"""Convert a CellVoyager measurement folder with FMI's faim-ipa converter (stage-position fusion),
through its public API. Runs in its own venv: faim-ipa 0.14 needs zarr 2 (tests/peers/
faim-requirements.txt; ``python -m venv .venv-faim && .venv-faim/bin/pip install -r
tests/peers/faim-requirements.txt``):

    <faim python> tests/peers/faim_convert_cellvoyager.py <measurement folder> <out dir> [processes]

Writes <out dir>/plate.zarr (one fused image per well, 5 levels) and prints its path as JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import distributed
from faim_ipa.hcs.acquisition import TileAlignmentOptions
from faim_ipa.hcs.cellvoyager import StackAcquisition
from faim_ipa.hcs.converter import ConvertToNGFFPlate, NGFFPlate
from faim_ipa.hcs.plate import PlateLayout
from faim_ipa.stitching import stitching_utils


def main() -> None:
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    processes = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    out.mkdir(parents=True, exist_ok=True)
    acquisition = StackAcquisition(acquisition_dir=folder, alignment=TileAlignmentOptions.STAGE_POSITION)
    with distributed.Client(n_workers=processes, threads_per_worker=1, processes=processes > 1) as client:
        converter = ConvertToNGFFPlate(
            ngff_plate=NGFFPlate(root_dir=out, name="plate", layout=PlateLayout.I384, order_name="order",
                                 barcode="barcode"),
            warp_func=stitching_utils.translate_tiles_2d, fuse_func=stitching_utils.fuse_mean, client=client)
        plate = converter.create_zarr_plate(acquisition)
        converter.run(plate=plate, plate_acquisition=acquisition, well_sub_group="0", chunks=(1, 2048, 2048),
                      max_layer=4)
    print(json.dumps({"plate": str(out / "plate.zarr")}))


if __name__ == "__main__":
    main()
