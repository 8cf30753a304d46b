"""Read a CellVoyager measurement folder with faim-ipa's own parser (an independent reader of the
mlf, mrf and the .mes settings file the mrf names), in faim-ipa's venv (it needs zarr 2):

    <faim python> tests/peers/faim_cellvoyager.py <measurement folder>

Prints one JSON line: wells, yx spacing, channels (number -> colour from the .mes) and per well its
tiles (time point, channel number, z, y, x in pixels)."""
from __future__ import annotations

import json
import sys

from faim_ipa.hcs.acquisition import TileAlignmentOptions
from faim_ipa.hcs.cellvoyager import StackAcquisition


def main() -> None:
    plate = StackAcquisition(sys.argv[1], alignment=TileAlignmentOptions.STAGE_POSITION)
    wells = plate.get_well_acquisitions()
    channels = plate.get_channel_metadata()
    out = {"wells": sorted("".join(w.get_row_col()) for w in wells),
           "yx_spacing": [float(v) for v in wells[0].get_yx_spacing()],
           "channels": {str(channels[i].channel_name): channels[i].display_color for i in sorted(channels)},
           "tiles": {"".join(w.get_row_col()): sorted(
               [int(t.position.time), int(t.position.channel), int(t.position.z), int(t.position.y),
                int(t.position.x)] for t in w.get_tiles()) for w in wells}}
    print(json.dumps(out, default=float))


if __name__ == "__main__":
    main()
