"""Molecular Devices MetaXpress folders as the instrument writes them while it acquires, with no
``.HTD`` (what faim-ipa reads):

    <plate>/<date>/<acquisition id>/[TimePoint_<t>/][ZStep_<z>/]<name>_<well>[_s<site>][_w<wave>]<UUID>.tif

with z projections beside the ``ZStep_`` folders, ``_thumb`` previews, stacks and projections
mixed per channel. Everything comes from file names and MetaSeries tags (metaseries.py); the plate
format is not recorded, so it is ``plate_shape`` or the smallest standard plate holding every well
(a warning line says which)."""
from __future__ import annotations

from pathlib import Path

from ...errors import InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition
from .folder_scan import FolderScan
from .metaseries import NAME, TIMEPOINT, ZSTEP, list_files, read_files


def claims(found: FolderScan) -> bool:
    """MetaXpress-named images (a UUID in the name) or TimePoint_/ZStep_ folders, and no .HTD."""
    if found.named(lambda n: n.lower().endswith(".htd")):
        return False
    named = found.named(lambda n: bool((m := NAME.match(n)) and m["uuid"]))
    return bool(named or found.dir_named(lambda n: bool(TIMEPOINT.match(n) or ZSTEP.match(n))))


def plate_folder(folder: Path) -> Path:
    """The folder that holds the images (or their TimePoint_/ZStep_ folders): ``folder`` or the one
    acquisition folder below it (MetaXpress writes <plate>/<date>/<id>/)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: MetaXpress folder does not exist")
    level = [folder]
    for _ in range(4):
        holding = [d for d in level if any((NAME.match(e.name) and e.is_file()) or
                                           ((TIMEPOINT.match(e.name) or ZSTEP.match(e.name)) and e.is_dir())
                                           for e in d.iterdir())]
        if len(holding) == 1:
            return holding[0]
        if len(holding) > 1:
            raise InputError(f"{folder}: {len(holding)} MetaXpress acquisitions "
                             f"({', '.join(str(d.relative_to(folder)) for d in holding[:5])}); give one of them")
        level = [e for d in level for e in sorted(d.iterdir()) if e.is_dir()]
    raise InputNotFoundError(f"{folder}: no MetaXpress images (<name>_<well>[_s<site>][_w<wave>]<UUID>.tif) "
                             "here or 3 levels below")


def read_metaxpress(folder: Path, pixel_size_yx: tuple[float, float] | None = None, projections: bool = False,
                    plate_shape: tuple[int, int] | None = None) -> Acquisition:
    plate = plate_folder(folder)
    files = list_files(plate)
    name = NAME.match(files[0].path.name)["plate"] if files else plate.name
    return read_files(files, name=name, source=plate, plate_shape=plate_shape, wave_names={},
                      projections=projections, pixel_size_yx=pixel_size_yx)
