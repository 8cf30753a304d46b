"""Write synthetic Opera Phenix / Operetta CLS measurements as Harmony 5 exports them:
``Images/Index.idx.xml`` (namespace ``http://www.perkinelmer.com/PEHH/HarmonyV5``, plate format,
wells, and per plane its file, row, column, field, plane, time point, channel with name and
wavelengths, resolution and positions in metre) beside ``r<row>c<col>f<field>p<plane>-ch<ch>sk1fk1fl1.tiff``.
Stage y points up the plate, so the index stores -y."""
from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from ..storage.atomic import atomic_write_bytes
from .cellvoyager import FieldSpec, well_rc
from .plate_spec import PlateSpec

NS = "http://www.perkinelmer.com/PEHH/HarmonyV5"


def name(fs: FieldSpec, z: int, ch: int, t: int = 0) -> str:
    r, c = well_rc(fs.well)
    return f"r{r:02d}c{c:02d}f{fs.index:02d}p{z:02d}-ch{ch}sk{t + 1}fk1fl1.tiff"


def write_field(out: Path, spec: PlateSpec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    import tifffile

    (out / "Images").mkdir(parents=True, exist_ok=True)
    for ch, zyx in enumerate(pixels_czyx, start=1):
        for z, plane in enumerate(zyx if zyx is not None else (), start=1):  # None: channel not imaged here
            tifffile.imwrite(out / "Images" / name(fs, z, ch, t), plane)
    return sum(p.nbytes for p in pixels_czyx if p is not None)


def _unit(unit: str) -> str:
    return f' Unit="{unit}"' if unit else ""


def _m(um: float) -> str:
    return f"{um * 1e-6:.10g}"


def _image(spec: PlateSpec, fs: FieldSpec, z: int, ch: int, t: int) -> str:
    r, c = well_rc(fs.well)
    label, emission = spec.channel(ch - 1)
    image_id = f"{r:02d}{c:02d}K{t + 1}F{fs.index}P{z}R{ch}"
    fields = [("id", "", image_id), ("State", "", "Ok"), ("URL", "", name(fs, z, ch, t)), ("Row", "", r), ("Col", "", c),
              ("FieldID", "", fs.index), ("PlaneID", "", z), ("TimepointID", "", t), ("ChannelID", "", ch),
              ("FlimID", "", 1), ("ChannelName", "", escape(label)), ("ImageType", "", "Signal"),
              ("AcquisitionType", "", "NipkowConfocal"), ("ChannelType", "", "Fluorescence"),
              ("ImageResolutionX", "m", _m(spec.pixel_size)), ("ImageResolutionY", "m", _m(spec.pixel_size)),
              ("ImageSizeX", "", spec.shape[1]), ("ImageSizeY", "", spec.shape[0]), ("BinningX", "", 1),
              ("BinningY", "", 1), ("MaxIntensity", "", 255 if spec.dtype == "uint8" else 65535),
              ("PositionX", "m", _m(fs.x_um)), ("PositionY", "m", _m(-fs.y_um)),
              ("PositionZ", "m", _m(spec.z_um(z - 1))), ("AbsPositionZ", "m", _m(spec.z_um(z - 1) + 0.0001 * 1e6)),
              ("MeasurementTimeOffset", "s", 600 * t), ("AbsTime", "", "2024-05-01T10:00:00+00:00"),
              ("MainExcitationWavelength", "nm", max(emission - 50, 350)), ("MainEmissionWavelength", "nm", emission or 500),
              ("ObjectiveMagnification", "", 20), ("ObjectiveNA", "", 1), ("ExposureTime", "s", 0.1)]
    body = "".join(f"<{k}{_unit(u)}>{v}</{k}>" for k, u, v in fields)
    return f'<Image Version="1">{body}</Image>'


def finish(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    images = [_image(spec, fs, z, ch, t) for t in range(spec.n_t) for fs in fields for z in range(1, spec.n_z + 1)
              for ch in range(1, spec.n_c + 1)
              if spec.acquired(fs.well, t, ch - 1) and not spec.failed(fs.well, fs.index)]
    wells = sorted({f.well for f in fields}, key=well_rc)
    well_ids = "".join(f'<Well id="{well_rc(w)[0]:02d}{well_rc(w)[1]:02d}" />' for w in wells)
    atomic_write_bytes(out / "Images" / "Index.idx.xml", (
        f'<?xml version="1.0" encoding="utf-8"?>\n<EvaluationInputData xmlns="{NS}" Version="2">'
        f'<User>zarrmill</User><InstrumentType>Operetta CLS</InstrumentType>'
        f'<Plates><Plate><PlateID>{escape(spec.plate)}</PlateID><MeasurementID>1</MeasurementID>'
        f'<PlateName>{escape(spec.plate)}</PlateName><PlateTypeName>{spec.plate_shape[0] * spec.plate_shape[1]} synthetic'
        f'</PlateTypeName><PlateRows>{spec.plate_shape[0]}</PlateRows><PlateColumns>{spec.plate_shape[1]}</PlateColumns>'
        f'{well_ids}</Plate></Plates><Images>' + "".join(images) + '</Images></EvaluationInputData>\n').encode())
