"""zarrmill writes NGFF documents itself (importing ome-zarr-py costs 1.4 s a step); they must be
the documents ome-zarr-py's own writer functions write, for 0.4 and 0.5."""
from __future__ import annotations

from pathlib import Path

import pytest
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_multiscales_metadata, write_plate_metadata, write_well_metadata

from zarrmill.io.ngff import metadata as ours
from zarrmill.io.ngff.metadata import Level, make_axes

FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}
LEVELS = [Level("0", [1.0, 0.5, 0.325, 0.325], None), Level("1", [1.0, 0.5, 0.65, 0.65], [0.0, 0.0, 0.1625, 0.1625])]
OMERO = {"channels": [{"label": "DAPI", "color": "0000FF", "active": True,
                       "window": {"min": 0, "max": 65535, "start": 10, "end": 900}}], "rdefs": {"model": "color"}}


def _attrs(path: Path, zf: int) -> dict:
    return dict(zarr.open_group(str(path), mode="r", zarr_format=zf).attrs)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_image_document_equals_ome_zarr_py(tmp_path: Path, version: str) -> None:
    fmt, zf = FORMATS[version]
    axes = make_axes("czyx")
    ref = zarr.open_group(str(tmp_path / "ref"), mode="w", zarr_format=zf)
    write_multiscales_metadata(ref, ours.level_datasets(LEVELS), fmt=fmt(), axes=axes, name="B/03 0",
                               metadata={"omero": OMERO})
    ours.write_image_metadata(tmp_path / "ours", version, axes, LEVELS, name="B/03 0", extra={"omero": OMERO})
    assert _attrs(tmp_path / "ours", zf) == _attrs(tmp_path / "ref", zf)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_well_and_plate_documents_equal_ome_zarr_py(tmp_path: Path, version: str) -> None:
    fmt, zf = FORMATS[version]
    rows, cols, wells = ["A", "B", "C"], ["01", "02", "03"], ["B/03", "C/01"]
    acquisitions = [{"id": 0, "name": "run 1"}]
    for root in ("ref", "ours"):
        zarr.open_group(str(tmp_path / root), mode="w", zarr_format=zf)
    write_well_metadata(zarr.open_group(str(tmp_path / "ref" / "B" / "03"), mode="a", zarr_format=zf),
                        [{"path": "0", "acquisition": 0}, {"path": "1", "acquisition": 0}], fmt=fmt())
    write_plate_metadata(zarr.open_group(str(tmp_path / "ref"), mode="a", zarr_format=zf), rows, cols, wells,
                         fmt=fmt(), name="plate 1", field_count=2, acquisitions=acquisitions)
    ours.write_well_metadata(tmp_path / "ours" / "B" / "03", version, ["0", "1"])
    ours.write_plate_metadata(tmp_path / "ours", version, rows, cols, wells, name="plate 1", field_count=2,
                              acquisitions=acquisitions)
    assert _attrs(tmp_path / "ours" / "B" / "03", zf) == _attrs(tmp_path / "ref" / "B" / "03", zf)
    assert _attrs(tmp_path / "ours", zf) == _attrs(tmp_path / "ref", zf)


def test_a_well_off_the_plate_grid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a 'row/column' path"):
        ours.write_plate_metadata(tmp_path, "0.5", ["A"], ["01"], ["B/01"], name=None, field_count=1,
                                  acquisitions=[{"id": 0}])
    assert not any(tmp_path.iterdir()), "nothing is written for a refused plate"
