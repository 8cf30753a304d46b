"""Write synthetic MetaXpress folders as the instrument writes them while it acquires
(``<plate>/<date>/<acquisition id>/[ZStep_<z>/]<plate>_<well>_s<site>_w<wave><UUID>.tif``, MetaSeries
tags with pixel size, stage position, illumination setting and wavelength, a ``_thumb`` preview per
image, and with ``projections`` a maximum projection beside the ZStep_ folders), or with
``htd`` the plate export that adds an ``.HTD`` plate file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..storage.atomic import atomic_write_bytes
from .cellvoyager import FieldSpec
from .plate_spec import PlateSpec

DATE, ACQUISITION = "2024-05-01", "1234"


def acquisition_folder(out: Path, spec: PlateSpec) -> Path:
    return out / spec.plate / DATE / ACQUISITION


def _tags(spec: PlateSpec, fs: FieldSpec, wave: int, z_um: float, z_step: int | None, projection: bool) -> str:
    name, emission = spec.channel(wave - 1)
    props = {"spatial-calibration-x": ("float", spec.pixel_size), "spatial-calibration-y": ("float", spec.pixel_size),
             "spatial-calibration-units": ("string", "um"), "pixel-size-x": ("int", spec.shape[1]),
             "pixel-size-y": ("int", spec.shape[0]), "stage-position-x": ("float", fs.x_um),
             "stage-position-y": ("float", fs.y_um), "z-position": ("float", z_um),
             "ImageXpress Micro X": ("float", fs.x_um), "ImageXpress Micro Y": ("float", fs.y_um),
             "ImageXpress Micro Z": ("float", z_um), "_IllumSetting_": ("string", name),
             "_MagSetting_": ("string", "20X Plan Apo"), "_MagNA_": ("float", 0.75),
             "Exposure Time": ("string", "100 ms"), "wavelength": ("float", emission or 500),
             "ShadingCorrection": ("string", "Off"), "stage-label": ("string", f"{fs.well} : Site {fs.index}"),
             "SiteX": ("int", 1), "SiteY": ("int", fs.index)}
    if z_step is not None:
        props["Z Step"] = ("int", z_step)
    if projection:
        props["Z Projection Method"] = ("string", "Maximum")
    body = "".join(f'<prop id="{k}" type="{t}" value="{v}"/>' for k, (t, v) in props.items())
    return f"<MetaData><PlaneInfo>{body}</PlaneInfo><SetInfo></SetInfo></MetaData>"


def _write(folder: Path, spec: PlateSpec, fs: FieldSpec, wave: int, plane: np.ndarray, tags: str) -> None:
    import tifffile

    stem = f"{spec.plate}_{fs.well}_s{fs.index}_w{wave}"
    folder.mkdir(parents=True, exist_ok=True)
    rel = f"{folder.parent.name}/{folder.name}"
    tifffile.imwrite(folder / f"{stem}{spec.uuid(rel, stem)}.tif", plane, description=tags, software="MetaSeries",
                     metadata=None)
    tifffile.imwrite(folder / f"{stem}_thumb{spec.uuid(rel, stem, 'thumb')}.tif", plane[::4, ::4])


def write_field(out: Path, spec: PlateSpec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    root = acquisition_folder(out, spec)
    if spec.n_t > 1:  # a time series: one TimePoint_ folder per time point
        root = root / f"TimePoint_{t + 1}"
    nbytes = 0
    for wave, zyx in enumerate(pixels_czyx, start=1):
        if zyx is None:
            continue  # a channel this well was not imaged with
        if spec.n_z == 1:
            _write(root, spec, fs, wave, zyx[0], _tags(spec, fs, wave, spec.z_um(0), None, False))
        else:
            for z, plane in enumerate(zyx, start=1):
                _write(root / f"ZStep_{z}", spec, fs, wave, plane, _tags(spec, fs, wave, spec.z_um(z - 1), z, False))
            if spec.projections:
                _write(root, spec, fs, wave, zyx.max(axis=0), _tags(spec, fs, wave, spec.z_um(0), None, True))
        nbytes += zyx.nbytes
    return nbytes


def finish(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    """As acquired, nothing is written last: the files are the record."""


def finish_htd(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    """The plate export's .HTD: plate format, sites, wavelengths and their names."""
    waves = "".join(f'"WaveName{w}", "{spec.channel(w - 1)[0]}"\n' for w in range(1, spec.n_c + 1))
    sites = len({f.index for f in fields})
    atomic_write_bytes(acquisition_folder(out, spec) / f"{spec.plate}.HTD", (
        '"HTSInfoFile", Version 1.0\n"Description", "zarrmill synthetic plate"\n"TimePoints", {spec.n_t}\n'
        f'"ZSeries", {"TRUE" if spec.n_z > 1 else "FALSE"}\n"ZSteps", {spec.n_z}\n'
        f'"XWells", {spec.plate_shape[1]}\n"YWells", {spec.plate_shape[0]}\n"XSites", 1\n"YSites", {sites}\n'
        f'"Waves", TRUE\n"NWavelengths", {spec.n_c}\n' + waves + '"EndFile"\n').encode("latin-1"))
