"""reshard on real stores: placement by coordinates, overlap policies, FOV tables, overview."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from hcs_fixtures import cellvoyager_folder
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store
from zarrmill.io.ngff.fov_table import read_fov, read_fov_table
from zarrmill.io.readers.planes import read_plane


def run(cli, task, *sets, extra=()):
    args = ["task", task, "--executor", "sync", *extra]
    for s in sets:
        args += ["--set", s]
    code, out, err = cli(*args)
    assert code == 0, err
    return out


def pattern_plate(cli, tmp_path: Path, fields: dict, pixel=(0.5, 0.25), name="p.zarr", version="0.5") -> Path:
    """fields: {(well, field): (array yx, x_um, y_um)} -> plate via the pattern ingest + positions CSV."""
    raw = tmp_path / f"raw-{name}"
    raw.mkdir()
    rows = ["well,field,x,y"]
    for (well, f), (arr, x, y) in fields.items():
        tifffile.imwrite(raw / f"{well}_s{f}.tif", arr)
        rows.append(f"{well},{f},{x},{y}")
    (raw / "pos.csv").write_text("\n".join(rows) + "\n")
    plate = tmp_path / name
    run(cli, "ingest", f"input={raw}", f"output={plate}", "pattern={well}_s{field}.tif",
        f"positions={raw / 'pos.csv'}", f"pixel_size=[{pixel[0]},{pixel[1]}]", f"ngff_version={version}")
    return plate


def reshard(cli, plate: Path, *sets: str) -> Path:
    """reshard with its default output: a new plate beside the input."""
    run(cli, "reshard", f"input={plate}", *sets)
    out = plate.with_name(plate.name.replace(".zarr", "-wells.zarr"))
    assert out.is_dir()
    return out


def well_image(plate: Path, well: str, name: str = "well") -> np.ndarray:
    return np.asarray(zarr.open_array(str(plate / well / name / "0"))[:])


def test_regular_grid_is_pixel_exact_and_inverse_view(cli, tmp_path):
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[2,3]", "shape=[60,80]", "z_planes=2")
    plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={raw}", f"output={plate}")
    before = {f: f.read_bytes() for f in plate.rglob("*") if f.is_file() and ".zarrmill" not in f.parts}
    wells = reshard(cli, plate)
    img = wells / "B" / "03" / "well"
    assert zarr.open_array(str(img / "0")).shape == (2, 2, 120, 240)
    rows = read_fov_table(img)
    assert len(rows) == 6
    for row in rows:
        src = zarr.open_array(str(plate / row["source_path"] / "0"))[:]
        np.testing.assert_array_equal(read_fov(img, row["FieldIndex"]), src)
    # level-0 chunks (or shards, where a FOV holds several chunks) are FOV-sized and aligned with the FOV grid
    meta = json.loads((img / "0" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [1, 1, 60, 80]
    validate_store(wells)
    assert check_store(wells)[0] == []
    # each well lists one image, the well image (Fractal's layout, which plate readers tile)
    well = json.loads((wells / "B" / "03" / "zarr.json").read_text())["attributes"]["ome"]["well"]
    assert [im["path"] for im in well["images"]] == ["well"]
    after = {f: f.read_bytes() for f in plate.rglob("*") if f.is_file() and ".zarrmill" not in f.parts}
    assert after == before, "the source plate is only read"


def test_reshard_refuses_to_write_into_its_input_plate(cli, tmp_path):
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[1,2]", "shape=[20,30]")
    plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={raw}", f"output={plate}")
    before = sorted(str(f) for f in tmp_path.rglob("*"))
    code, _, err = cli("task", "reshard", "--executor", "sync", "--set", f"input={plate}",
                       "--set", f"output={plate}/.")
    assert code == 2 and "output must be a new plate" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(str(f) for f in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("policy,expected", [("first", 10), ("last", 30), ("mean", 20)])
def test_overlap_policies(cli, tmp_path, policy, expected):
    a = np.full((20, 40), 10, np.uint16)
    b = np.full((20, 40), 30, np.uint16)
    # x pixel 0.25 um: FOV 2 starts at 7.5 um = pixel 30, overlapping FOV 1 by 10 pixels
    plate = pattern_plate(cli, tmp_path, {("A01", 1): (a, 0.0, 0.0), ("A01", 2): (b, 7.5, 0.0)})
    img = well_image(reshard(cli, plate, f"overlap={policy}"), "A/01")[0, 0]
    assert img.shape == (20, 70)
    assert (img[:, :30] == 10).all() and (img[:, 40:] == 30).all()
    assert (img[:, 30:40] == expected).all()


def test_shift_moves_fovs_apart_and_records_both_positions(cli, tmp_path):
    a = np.full((20, 40), 10, np.uint16)
    b = np.full((20, 40), 30, np.uint16)
    plate = pattern_plate(cli, tmp_path, {("A01", 1): (a, 0.0, 0.0), ("A01", 2): (b, 7.5, 0.0)})
    wells = reshard(cli, plate, "overlap=shift")
    img = well_image(wells, "A/01")[0, 0]
    assert img.shape == (20, 80)
    assert (img[:, :40] == 10).all() and (img[:, 40:] == 30).all()
    rows = {r["FieldIndex"]: r for r in read_fov_table(wells / "A" / "01" / "well")}
    assert rows["FOV_2"]["x_micrometer"] == 10.0 and rows["FOV_2"]["x_micrometer_original"] == 7.5
    assert rows["FOV_2"]["x_pixel"] == 40 and rows["FOV_2"]["x_pixel_original"] == 30


def test_real_overlapping_rois_match_fractals_corrected_positions(cli, tmp_path):
    from hcs_fixtures import CV

    folder, _ = cellvoyager_folder(tmp_path / "raw", "metadata_files/overlapping_ROIs/MeasurementData.mlf",
                                   "metadata_files/MeasurementDetail.mrf")
    plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={folder}", f"output={plate}")
    wells = reshard(cli, plate, "overlap=shift")
    rows = {int(r["FieldIndex"].split("_")[1]): r for r in read_fov_table(wells / "B" / "03" / "well")}
    with open(CV / "metadata_files" / "overlapping_ROIs" / "corrected_site_metadata.csv") as fh:
        expected = {int(r["FieldIndex"]): r for r in csv.DictReader(fh)}
    x0 = float(expected[1]["x_micrometer"])
    for f in (1, 2):
        assert rows[f]["x_micrometer"] == pytest.approx(float(expected[f]["x_micrometer"]) - x0, abs=1e-6)
        assert rows[f]["x_micrometer_original"] == pytest.approx(
            float(expected[f]["x_micrometer_original"]) - x0, abs=1e-6)
    np.testing.assert_array_equal(read_fov(wells / "B" / "03" / "well", "FOV_2")[0, 0],
                                  read_plane(folder / "myplate_B03_T0002F002L01A01Z01C01.tif"))


def test_layouts_follow_translations_with_anisotropic_pixels(cli, tmp_path):
    rng = np.random.default_rng(5)
    tiles = [rng.integers(0, 1000, size=(16, 24), dtype=np.uint16) for _ in range(4)]
    # pixel 0.5 um in y, 0.25 um in x: a tile is 8 um high, 6 um wide
    row = {("A01", i + 1): (t, 6.0 * i, 0.0) for i, t in enumerate(tiles)}
    irregular = {("A02", i + 1): (t, x, y) for i, (t, (x, y)) in
                 enumerate(zip(tiles, [(0.0, 0.0), (7.0, 1.0), (0.5, 9.0), (20.0, 30.0)]))}
    plate = pattern_plate(cli, tmp_path, {**row, **irregular})
    wells = reshard(cli, plate)
    strip = well_image(wells, "A/01")[0, 0]
    scattered = well_image(wells, "A/02")[0, 0]
    # the larger well sets the plate's common canvas; the strip is zero-padded beyond its FOVs
    assert strip.shape == scattered.shape == (60 + 16, 80 + 24)
    np.testing.assert_array_equal(strip[:16, :96], np.concatenate(tiles, axis=1))
    assert not strip[16:].any() and not strip[:, 96:].any()
    # 1 um = 2 pixels in y, 4 pixels in x
    for t, (y, x) in zip(tiles, [(0, 0), (2, 28), (18, 2), (60, 80)]):
        np.testing.assert_array_equal(scattered[y:y + 16, x:x + 24], t)
    meta = json.loads((wells / "A" / "02" / "well" / "zarr.json").read_text())["attributes"]["ome"]
    cts = meta["multiscales"][0]["datasets"][0]["coordinateTransformations"]
    assert cts[0]["scale"][-2:] == [0.5, 0.25]


def test_new_plate_output_overview_and_readers(cli, tmp_path):
    from ngio import open_ome_zarr_container
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03,C05]", "grid=[2,2]", "shape=[64,96]",
        "overlap=0.1", "jitter_um=1.0")
    plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={raw}", f"output={plate}")
    out = tmp_path / "wells.zarr"
    run(cli, "reshard", f"input={plate}", f"output={out}", "overview=true", "overview_size=64", "min_size=32")
    validate_store(out)
    assert check_store(out)[0] == []
    assert not (plate / "B" / "03" / "well").exists(), "new-plate mode must not touch the input"
    attrs = json.loads((out / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    assert [w["path"] for w in attrs["wells"]] == ["B/03", "C/05"]
    nodes = list(Reader(parse_url(str(out)))())
    assert nodes[0].data[0].shape[-2:][0] > 0
    overview = json.loads((out / "overview" / "zarr.json").read_text())["attributes"]
    boxes = overview["zarrmill"]["overview"]["wells"]
    k = overview["zarrmill"]["overview"]["source_level"]
    ov = zarr.open_array(str(out / "overview" / "0"))[:]
    for well, box in boxes.items():
        src = zarr.open_array(str(out / well / "well" / k))[:]
        np.testing.assert_array_equal(ov[..., box["y"]:box["y"] + box["height"], box["x"]:box["x"] + box["width"]], src)
    container = open_ome_zarr_container(str(out / "B" / "03" / "well"))
    table = container.get_table("FOV_ROI_table")
    roi = table.get("FOV_3")
    assert roi is not None
    data = container.get_image().get_roi(roi)
    np.testing.assert_array_equal(np.squeeze(data), np.squeeze(read_fov(out / "B" / "03" / "well", "FOV_3")))


def test_ngff_04_plate_gets_large_chunks_not_shards(cli, tmp_path):
    a = np.arange(20 * 40, dtype=np.uint16).reshape(20, 40)
    plate = pattern_plate(cli, tmp_path, {("A01", 1): (a, 0.0, 0.0), ("A01", 2): (a + 1, 10.0, 0.0)},
                          version="0.4")
    out = tmp_path / "wells.zarr"
    run(cli, "reshard", f"input={plate}", f"output={out}")
    img = out / "A" / "01" / "well"
    assert (img / ".zattrs").exists()
    np.testing.assert_array_equal(read_fov(img, "FOV_2")[0, 0], a + 1)
    validate_store(out)
    assert check_store(out)[0] == []


def test_resharding_a_lower_level_keeps_that_levels_pixel_size(cli, tmp_path):
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[1,2]", "shape=[64,96]", "pixel_size=0.5")
    plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={raw}", f"output={plate}")
    run(cli, "pyramid", f"input={plate}", "min_size=16")
    out = tmp_path / "w.zarr"
    run(cli, "reshard", f"input={plate}", f"output={out}", "level=1", "min_size=16")
    ms = json.loads((out / "B" / "03" / "well" / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    fov1 = json.loads((plate / "B" / "03" / "0" / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    level1 = fov1["datasets"][1]["coordinateTransformations"][0]["scale"]
    assert ms["datasets"][0]["coordinateTransformations"][0]["scale"] == level1
    assert level1[-1] == 1.0  # 0.5 um pixels, halved
    np.testing.assert_array_equal(well_image(out, "B/03")[..., :48],
                                  zarr.open_array(str(plate / "B" / "03" / "0" / "1"))[:])


def test_fovs_are_placed_at_the_nearest_pixel_of_their_stage_position() -> None:
    """Placement rounds (origin - well origin) / pixel size: 2.6 pixels is pixel 3, 2.4 is 2, and
    negative offsets from the first FOV's corner cannot occur (the well origin is the minimum)."""
    from zarrmill.io.ngff.placement import Fov, place

    fovs = [Fov("FOV_1", "B/03/0", (10.0, 100.0), (4, 4)), Fov("FOV_2", "B/03/1", (10.0 + 2.6 * 0.5, 100.0 + 2.4 * 0.5),
                                                                (4, 4))]
    placed, origin = place(fovs, (0.5, 0.5), "first")
    assert origin == (10.0, 100.0)
    assert [f.pixel for f in placed] == [(0, 0), (3, 2)]
