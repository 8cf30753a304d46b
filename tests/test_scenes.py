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


def _czi_plate(cli, tmp_path, scenes):
    from scene_files import write_czi_plate

    require("pylibCZIrw", "Zeiss's CZI writer makes the test CZI plates (test extra)")
    require("bioio_czi", "the czi extra reads CZI plates")
    write_czi_plate(tmp_path / "plate.czi", scenes)
    out = tmp_path / "plate.ome.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'plate.czi'}",
                       "--set", f"output={out}")
    assert code == 0, err
    root = zarr.open_group(str(out), mode="r")
    wells = [w["path"] for w in root.attrs["ome"]["plate"]["wells"]]
    return out, wells, err


def test_a_czi_plate_lands_in_the_wells_its_scenes_name(cli, tmp_path):
    """A Celldiscoverer-7-like CZI written by Zeiss's own writer: scenes D6, D7 and E2 (carrier
    RowIndex/ColumnIndex from 1) land in D/06, D/07 and E/02 with their pixels and channel names, not
    a row off; check passes."""
    from scene_files import czi_scene

    out, wells, _ = _czi_plate(cli, tmp_path, [("D6", 4, 6), ("D7", 4, 7), ("E2", 5, 2)])
    assert wells == ["D/06", "D/07", "E/02"]
    for i, well in enumerate(wells):
        image = zarr.open_group(str(out / well / "0"), mode="r")
        assert [c["label"] for c in image.attrs["ome"]["omero"]["channels"]] == ["DAPI", "GFP"]
        np.testing.assert_array_equal(np.asarray(image["0"][:])[:, 0], czi_scene(i))
    assert check_store(out)[0] == []


def test_a_czi_carrier_counts_rows_and_columns_from_one(cli, tmp_path):
    """Scenes named as ZEN names positions (P1, P2) are placed by the carrier's row and column,
    which count from 1 (a reader counting rows from 0 puts them a row off)."""
    _, wells, _ = _czi_plate(cli, tmp_path, [("P1", 2, 3), ("P2", 2, 4), ("P3", 3, 3)])
    assert wells == ["B/03", "B/04", "C/03"]


def test_a_scene_name_and_carrier_that_disagree_is_one_warning_naming_both(cli, tmp_path):
    _, wells, err = _czi_plate(cli, tmp_path, [("D6", 5, 6), ("D7", 4, 7)])
    assert wells == ["D/06", "D/07"]
    line = next(x for x in err.splitlines() if "derived plate position" in x)
    assert "'D6-D6' (well D06)" in line and "says well E06" in line and "using the scene's own name" in line


def test_library_log_records_and_warnings_go_to_the_run_log_not_the_terminal(tmp_path):
    """bioio-czi logs a traceback for every scene name it cannot parse and xsdata warns about
    metadata it converts: in a real process, the terminal shows zarrmill's own lines only, and the
    records are in the log file under the runs folder."""
    import os

    from conftest import zarrmill_subprocess
    from pylibCZIrw import czi as pyczi

    require("bioio_czi", "the czi extra reads CZI files")
    with pyczi.create_czi(str(tmp_path / "plain.czi"), exist_ok=True) as czi:  # scenes named Image:0 by bioio
        czi.write(np.ones((16, 16), np.uint16), plane={"C": 0, "Z": 0, "T": 0}, scene=0)
        czi.write_metadata("plain", scale_x=1e-6, scale_y=1e-6)
    env = {**os.environ, "ZARRMILL_RUNS_DIR": str(tmp_path / "runs")}
    done = zarrmill_subprocess("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'plain.czi'}",
                               "--set", f"output={tmp_path / 'out.zarr'}", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    foreign = [line for line in done.stderr.splitlines() if not line.startswith(("[ingest]", "zarrmill: "))]
    assert not foreign, done.stderr
    logs = list((tmp_path / "runs" / "logs").glob("*.log"))
    assert len(logs) == 1 and "Failed to parse position index" in logs[0].read_text()
