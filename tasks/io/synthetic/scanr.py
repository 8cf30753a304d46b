"""Write synthetic Evident scanR acquisitions: ``data/metadata.ome.xml`` (OME 2016-06: the plate,
one Image per well position with id ``Image:W<well>P<position>``, channel names, physical sizes,
a Plane per (z, c, t) with stage position, a TiffData naming its file) beside
``data/<well>--W<nnnnn>--P<nnnnn>--Z<nnnnn>--T<nnnnn>--<channel>.tif``. Stage y points up the
plate, so planes store -y."""
from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from ..storage.atomic import atomic_write_bytes
from .cellvoyager import FieldSpec, well_rc
from .plate_spec import PlateSpec

NS = "http://www.openmicroscopy.org/Schemas/OME/2016-06"


def name(spec: PlateSpec, fs: FieldSpec, z: int, c: int, t: int = 0) -> str:
    return (f"{fs.well}--W{spec.well_index(fs.well):05d}--P{fs.index:05d}--Z{z:05d}--T{t:05d}--"
            f"{spec.channel(c)[0]}.tif")


def write_field(out: Path, spec: PlateSpec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    import tifffile

    (out / "data").mkdir(parents=True, exist_ok=True)
    for c, zyx in enumerate(pixels_czyx):
        for z, plane in enumerate(zyx):
            tifffile.imwrite(out / "data" / name(spec, fs, z, c, t), plane)
    return sum(p.nbytes for p in pixels_czyx)


def _image(spec: PlateSpec, fs: FieldSpec, i: int) -> str:
    w = spec.well_index(fs.well)
    channels = "".join(f'<Channel ID="Channel:{i}:{c}" Name="{escape(spec.channel(c)[0])}" SamplesPerPixel="1"'
                       f'{" EmissionWavelength=" + chr(34) + str(spec.channel(c)[1]) + chr(34) if spec.channel(c)[1] else ""}/>'
                       for c in range(spec.n_c))
    planes = [(z, c, t) for t in range(spec.n_t) for z in range(spec.n_z) for c in range(spec.n_c)]
    tiffs = "".join(f'<TiffData FirstZ="{z}" FirstC="{c}" FirstT="{t}" IFD="0" PlaneCount="1">'
                    f'<UUID FileName="{escape(name(spec, fs, z, c, t))}">urn:uuid:'
                    f'{spec.uuid("scanr", fs.well, fs.index, z, c, t).lower()}</UUID></TiffData>' for z, c, t in planes)
    plane_els = "".join(f'<Plane TheZ="{z}" TheC="{c}" TheT="{t}" PositionX="{fs.x_um}" PositionXUnit="µm" '
                        f'PositionY="{-fs.y_um}" PositionYUnit="µm" PositionZ="{spec.z_um(z)}" PositionZUnit="µm"/>'
                        for z, c, t in planes)
    z_size = f' PhysicalSizeZ="{spec.z_step}" PhysicalSizeZUnit="µm"' if spec.n_z > 1 else ""
    return (f'<Image ID="Image:W{w}P{fs.index}" Name="{fs.well} W{w} P{fs.index}"><Pixels ID="Pixels:{i}" '
            f'DimensionOrder="XYZCT" Type="{spec.dtype}" SizeX="{spec.shape[1]}" SizeY="{spec.shape[0]}" '
            f'SizeZ="{spec.n_z}" SizeC="{spec.n_c}" SizeT="{spec.n_t}" PhysicalSizeX="{spec.pixel_size}" PhysicalSizeXUnit="µm" '
            f'PhysicalSizeY="{spec.pixel_size}" PhysicalSizeYUnit="µm"{z_size}>{channels}{tiffs}{plane_els}</Pixels></Image>')


def finish(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    wells = sorted({f.well for f in fields}, key=well_rc)
    index = {(f.well, f.index): i for i, f in enumerate(fields)}
    well_els = "".join(
        f'<Well ID="Well:{n}" Row="{well_rc(w)[0] - 1}" Column="{well_rc(w)[1] - 1}">'
        + "".join(f'<WellSample ID="WellSample:{n}:{f.index}" Index="{index[(w, f.index)]}">'
                  f'<ImageRef ID="Image:W{spec.well_index(w)}P{f.index}"/></WellSample>' for f in fields if f.well == w)
        + "</Well>" for n, w in enumerate(wells))
    plate = (f'<Plate ID="Plate:0" Name="{escape(spec.plate)}" Rows="{spec.plate_shape[0]}" '
             f'Columns="{spec.plate_shape[1]}">{well_els}</Plate>')
    images = "".join(_image(spec, fs, i) for i, fs in enumerate(fields))
    atomic_write_bytes(out / "data" / "metadata.ome.xml", (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<OME xmlns="{NS}" '
        f'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:schemaLocation="{NS} {NS}/ome.xsd" Creator="zarrmill generate-plate (scanR layout)">'
        f'{plate}{images}</OME>\n').encode())
