"""Files of many scenes through bioio (the formats extra): a multi-position OME-TIFF written with
tifffile becomes a plate whose fields sit at their stage positions, read plane by plane."""
from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from conftest import require
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store

require("bioio", "the formats extra reads files of many scenes")
from scene_files import PIXEL, POSITIONS, scene, write_positions  # noqa: E402

def test_a_multi_position_ome_tiff_becomes_a_plate_at_its_positions(cli, tmp_path):
    write_positions(tmp_path / "positions.ome.tif")
    plate = tmp_path / "plate.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'positions.ome.tif'}",
                       "--set", f"output={plate}")
    assert code == 0, err
    validate_store(plate)
    assert check_store(plate)[0] == []
    for i in range(3):
        image = plate / "A" / "01" / str(i)
        np.testing.assert_array_equal(zarr.open_array(str(image / "0"))[:], scene(i))
        ms = json.loads((image / "zarr.json").read_text())["attributes"]["ome"]
        cts = ms["multiscales"][0]["datasets"][0]["coordinateTransformations"]
        assert cts[0]["scale"][-3:] == [2.0, PIXEL, PIXEL]
        x = cts[1]["translation"][-1] if len(cts) > 1 else 0.0
        assert x == pytest.approx(POSITIONS[i][0] - POSITIONS[0][0])
    assert [c["label"] for c in ms["omero"]["channels"]] == ["DAPI", "GFP"]
    assert cli("task", "reshard", "--executor", "sync", "--set", f"input={plate}", "--set", "min_size=8")[0] == 0
    well = zarr.open_array(str(tmp_path / "plate-wells.zarr" / "A" / "01" / "well" / "0"))[:]
    np.testing.assert_array_equal(well, np.concatenate([scene(i) for i in range(3)], axis=-1))


def test_the_ome_plate_places_scenes_in_their_wells():
    from ome_types.model import OME, Image, ImageRef, Pixels, Plate, Well, WellSample

    images = [Image(id=f"Image:{i}", pixels=Pixels(id=f"Pixels:{i}", dimension_order="XYZCT", size_x=4, size_y=4,
                                                    size_z=1, size_c=1, size_t=1, type="uint16")) for i in range(3)]
    plate = Plate(id="Plate:0", wells=[
        Well(id="Well:0", row=1, column=2, well_samples=[WellSample(id="WellSample:0", index=0,
                                                                    image_ref=ImageRef(id="Image:0")),
                                                         WellSample(id="WellSample:1", index=1,
                                                                    image_ref=ImageRef(id="Image:1"))]),
        Well(id="Well:1", row=0, column=0, well_samples=[WellSample(id="WellSample:2", index=2,
                                                                    image_ref=ImageRef(id="Image:2"))])])
    from zarrmill.io.readers.scenes import _ome_wells

    assert _ome_wells(OME(images=images, plates=[plate])) == {0: (2, 3), 1: (2, 3), 2: (1, 1)}


def test_a_file_bioio_cannot_read_is_one_line(cli, tmp_path):
    (tmp_path / "broken.czi").write_bytes(b"not a czi file")
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'broken.czi'}",
                       "--set", f"output={tmp_path / 'p.zarr'}")
    assert code == 2 and "broken.czi" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.zarr").exists()
