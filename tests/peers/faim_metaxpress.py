"""Read a MetaXpress folder as acquired with faim-ipa's own parser (an independent reader of
MetaXpress file names and MetaSeries tags), in faim-ipa's venv (it needs zarr 2):

    <faim python> tests/peers/faim_metaxpress.py <acquisition folder> <single|stack|mixed>

Prints one JSON line: wells, yx and z spacing, channel names and per well its tiles (channel, z,
y, x in pixels, file name)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from faim_ipa.hcs.acquisition import TileAlignmentOptions
from faim_ipa.hcs.imagexpress import MixedAcquisition, SinglePlaneAcquisition, StackAcquisition


def main() -> None:
    folder, kind = sys.argv[1], sys.argv[2]
    cls = {"single": SinglePlaneAcquisition, "stack": StackAcquisition, "mixed": MixedAcquisition}[kind]
    plate = cls(folder, alignment=TileAlignmentOptions.STAGE_POSITION)
    wells = plate.get_well_acquisitions()
    channels = plate.get_channel_metadata()
    out = {"wells": sorted("".join(w.get_row_col()) for w in wells),
           "yx_spacing": list(wells[0].get_yx_spacing()), "z_spacing": wells[0].get_z_spacing(),
           "channels": [channels[i].channel_name for i in sorted(channels)],
           "tiles": {"".join(w.get_row_col()): sorted(
               [t.position.channel, t.position.z, t.position.y, t.position.x, Path(t.path).name]
               for t in w.get_tiles()) for w in wells}}
    print(json.dumps(out, default=float))


if __name__ == "__main__":
    main()
