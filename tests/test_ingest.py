"""ingest on real stores: pixel-exact round trips, official schemas, ome-zarr-py reads, bad input."""
import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from hcs_fixtures import cellvoyager_folder, copy_png_folder
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store
from zarrmill.io.readers.planes import read_plane

SMALL = (54, 64)
VARIANTS = {
    "multiz": ("metadata_files/MeasurementData_SingleWell2Sites_MultiZ.mlf", "metadata_files/MeasurementDetail.mrf", None),
    "2x2": ("metadata_files/MeasurementData_2x2_well.mlf", "metadata_files/MeasurementDetail_2x2_well.mrf", SMALL),
    "singlez": ("metadata_files/MeasurementData_SingleWell2Sites_SingleZ.mlf", "metadata_files/MeasurementDetail.mrf", SMALL),
    "plate_name": ("metadata_files/MeasurementData_SingleWell2Sites_MultiZ_another_well_name_in_plate_name.mlf",
                   "metadata_files/MeasurementDetail.mrf", SMALL),
    "1536": ("syn_1536_images/MeasurementData.mlf", "syn_1536_images/MeasurementDetail.mrf", SMALL),
    "overlap": ("metadata_files/overlapping_ROIs/MeasurementData.mlf", "metadata_files/MeasurementDetail.mrf", SMALL),
}


def ingest(cli, src, out, *sets):
    args = ["task", "ingest", "--set", f"input={src}", "--set", f"output={out}", "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def field_arrays(plate: Path):
    attrs = json.loads((plate / "zarr.json").read_text())["attributes"]["ome"]
    for well in attrs["plate"]["wells"]:
        wattrs = json.loads((plate / well["path"] / "zarr.json").read_text())["attributes"]["ome"]
        for im in wattrs["well"]["images"]:
            yield f"{well['path']}/{im['path']}", zarr.open_array(str(plate / well["path"] / im["path"] / "0"))


def assert_round_trip(plate: Path, folder: Path):
    from zarrmill.io.readers.cellvoyager import read_cellvoyager
    from zarrmill.io.ngff.hcs import field_path

    acq = read_cellvoyager(folder)
    checked = 0
    for (r, c, f), planes in acq.fields().items():
        arr = zarr.open_array(str(plate / field_path(r, c, f, acq) / "0"))
        for pl in planes:
            np.testing.assert_array_equal(arr[pl.c, pl.z], read_plane(pl.path))
            checked += 1
    assert checked == len(acq.planes)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cellvoyager_round_trip_schemas_and_check(cli, tmp_path, variant):
    mlf, mrf, shrink = VARIANTS[variant]
    folder, _ = cellvoyager_folder(tmp_path / "raw", mlf, mrf, shrink)
    code, _, err = ingest(cli, folder, tmp_path / "plate.zarr")
    assert code == 0, err
    assert_round_trip(tmp_path / "plate.zarr", folder)
    counts = validate_store(tmp_path / "plate.zarr")
    assert counts["plate"] == 1 and counts["image"] >= 2
    assert check_store(tmp_path / "plate.zarr")[0] == []


def test_translations_come_from_stage_positions(cli, tmp_path):
    mlf, mrf, _ = VARIANTS["2x2"]
    folder, _ = cellvoyager_folder(tmp_path / "raw", mlf, mrf, SMALL)
    assert ingest(cli, folder, tmp_path / "p.zarr")[0] == 0
    found = {}
    for path, _ in field_arrays(tmp_path / "p.zarr"):
        ms = json.loads((tmp_path / "p.zarr" / path / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
        cts = {ct["type"]: ct[ct["type"]] for ct in ms["datasets"][0]["coordinateTransformations"]}
        found[path] = (cts["scale"], cts.get("translation", [0, 0, 0, 0]))
    # positions (not a grid): y = 1517.7 - Y (flipped, relative to the well), x = X + 1448.3
    assert sorted(t[1][2:] for t in found.values()) == [[0.0, 0.0], [0.0, 416.0], [351.0, 0.0], [351.0, 416.0]]
    assert all(s == [1.0, 1.0, 0.1625, 0.1625] for s, _ in found.values())


def test_png_folder_and_ome_zarr_reader(cli, tmp_path):
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Plate, Reader

    folder = copy_png_folder(tmp_path / "png")
    assert ingest(cli, folder, tmp_path / "p.zarr")[0] == 0
    assert_round_trip(tmp_path / "p.zarr", folder)
    assert cli("task", "pyramid", "--set", f"input={tmp_path / 'p.zarr'}", "--executor", "sync")[0] == 0
    nodes = list(Reader(parse_url(str(tmp_path / "p.zarr")))())
    plate = nodes[0]
    assert any(isinstance(s, Plate) for s in plate.specs)
    assert len(plate.data) == 5  # the plate at every pyramid level
    first = plate.data[0]
    assert first.shape[-2:] == (8 * 2160, 12 * 2560)
    field = list(Reader(parse_url(str(tmp_path / "p.zarr" / "B" / "03" / "1")))())[0]
    assert [d.shape[-1] for d in field.data] == [2560, 1280, 640, 320, 160]
    np.testing.assert_array_equal(np.asarray(field.data[0][0, 0]),
                                  read_plane(folder / "myplate_B03_T0002F002L01A01Z01C01.png"))


def test_ngff_04_on_zarr_v2(cli, tmp_path):
    mlf, mrf, _ = VARIANTS["multiz"]
    folder, _ = cellvoyager_folder(tmp_path / "raw", mlf, mrf, SMALL)
    assert ingest(cli, folder, tmp_path / "p.zarr", "ngff_version=0.4")[0] == 0
    assert (tmp_path / "p.zarr" / ".zattrs").exists() and not (tmp_path / "p.zarr" / "zarr.json").exists()
    assert validate_store(tmp_path / "p.zarr")["plate"] == 1
    assert cli("task", "pyramid", "--set", f"input={tmp_path / 'p.zarr'}", "--executor", "sync",
               "--set", "min_size=16")[0] == 0
    assert check_store(tmp_path / "p.zarr")[0] == []
    assert_round_trip(tmp_path / "p.zarr", folder)


def write_imagexpress(folder: Path, wells=("A01", "B02"), fields=3, channels=("DAPI", "GFP")):
    folder.mkdir()
    rng = np.random.default_rng(1)
    truth, rows = {}, ["well,field,x,y"]
    for well in wells:
        for f in range(1, fields + 1):
            rows.append(f"{well},{f},{(f - 1) * 33.5},{(f % 2) * 10.25}")
            for ch in channels:
                img = rng.integers(0, 60000, size=(40, 50), dtype=np.uint16)
                name = f"plateX_{well}_s{f}_w{ch}.tif"
                tifffile.imwrite(folder / name, img)
                truth[name] = img
    (folder / "positions.csv").write_text("\n".join(rows) + "\n")
    return truth


def test_pattern_series_with_positions(cli, tmp_path):
    truth = write_imagexpress(tmp_path / "raw")
    code, _, err = ingest(cli, tmp_path / "raw", tmp_path / "p.zarr", "pattern={plate}_{well}_s{field}_w{channel}.tif",
                          f"positions={tmp_path / 'raw' / 'positions.csv'}", "pixel_size=[0.5,0.5]",
                          "channel_names=[DAPI,GFP]")
    assert code == 0, err
    arr = zarr.open_array(str(tmp_path / "p.zarr" / "B" / "02" / "2" / "0"))
    np.testing.assert_array_equal(arr[1, 0], truth["plateX_B02_s3_wGFP.tif"])
    attrs = json.loads((tmp_path / "p.zarr" / "B" / "02" / "2" / "zarr.json").read_text())["attributes"]["ome"]
    translation = attrs["multiscales"][0]["datasets"][0]["coordinateTransformations"][1]["translation"]
    assert translation[2:] == [10.25, 67.0]
    assert [c["label"] for c in attrs["omero"]["channels"]] == ["DAPI", "GFP"]
    validate_store(tmp_path / "p.zarr")


def test_plain_folder_of_tiles_on_a_grid(cli, tmp_path):
    (tmp_path / "tiles").mkdir()
    for i in range(1, 5):
        tifffile.imwrite(tmp_path / "tiles" / f"tile_{i}.tif", np.full((20, 30), i, dtype=np.uint8))
    assert ingest(cli, tmp_path / "tiles", tmp_path / "p.zarr", "pattern=tile_{field}.tif")[0] == 0
    assert zarr.open_array(str(tmp_path / "p.zarr" / "A" / "01" / "3" / "0"))[0, 0, 0, 0] == 4
    tr = json.loads((tmp_path / "p.zarr" / "A" / "01" / "3" / "zarr.json").read_text())["attributes"]["ome"][
        "multiscales"][0]["datasets"][0]["coordinateTransformations"][1]["translation"]
    assert tr[2:] == [20.0, 30.0]  # 2x2 grid fallback: 4th tile at row 1, column 1


@pytest.mark.parametrize("kind", ["ome-tiff", "imagej-tiff", "npy"])
def test_single_files(cli, tmp_path, kind):
    data = (np.arange(3 * 9 * 70 * 50) % 5000).astype(np.uint16).reshape(3, 9, 70, 50)  # c z y x
    if kind == "ome-tiff":
        src = tmp_path / "a.ome.tif"
        tifffile.imwrite(src, data, ome=True, metadata={"axes": "CZYX", "PhysicalSizeX": 0.4,
                                                         "PhysicalSizeY": 0.4, "PhysicalSizeZ": 2.0})
        expect_scale = [1.0, 2.0, 0.4, 0.4]
    elif kind == "imagej-tiff":
        src = tmp_path / "a.tif"
        tifffile.imwrite(src, data.transpose(1, 0, 2, 3), imagej=True, resolution=(1 / 0.25, 1 / 0.25),
                         metadata={"axes": "ZCYX", "spacing": 1.5})
        expect_scale = [1.0, 1.5, 0.25, 0.25]
    else:
        src = tmp_path / "a.npy"
        np.save(src, data)
        expect_scale = [1.0, 1.0, 1.0, 1.0]
    code, _, err = ingest(cli, src, tmp_path / "img.zarr")
    assert code == 0, err
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "img.zarr" / "0"))[:], data)
    ms = json.loads((tmp_path / "img.zarr" / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    assert ms["datasets"][0]["coordinateTransformations"][0]["scale"] == expect_scale
    assert [a["name"] for a in ms["axes"]] == ["c", "z", "y", "x"]
    validate_store(tmp_path / "img.zarr")


# -- bad input: one clear line, nothing left that passes as valid -----------------------------------
def cv_folder(tmp_path):
    mlf, mrf, _ = VARIANTS["multiz"]
    return cellvoyager_folder(tmp_path / "raw", mlf, mrf, SMALL)[0]


def assert_one_line_and_no_valid_output(code, err, out: Path, *needles):
    errors = [x for x in err.strip().splitlines() if x.startswith("zarrmill: error")]
    line = err.strip().splitlines()[-1]
    assert code in (1, 2) and errors == [line], err
    for needle in needles:
        assert needle in line, line
    assert not out.exists() or check_store(out)[0], "a failed ingest must not look valid"


def test_corrupt_tiff(cli, tmp_path):
    folder = cv_folder(tmp_path)
    (folder / "myplate_B03_T0002F002L01A01Z02C01.tif").write_bytes(b"II*\x00garbage")
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "myplate_B03_T0002F002L01A01Z02C01.tif",
                                        "cannot read image")


def test_corrupt_tiff_found_in_unit_without_header_checks(cli, tmp_path):
    folder = cv_folder(tmp_path)
    (folder / "myplate_B03_T0002F002L01A01Z02C01.tif").write_bytes(b"II*\x00garbage")
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr", "check_headers=false")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "unit B/03/1/t0",
                                        "myplate_B03_T0002F002L01A01Z02C01.tif")


def test_missing_file_error_and_zeros_option(cli, tmp_path):
    folder = cv_folder(tmp_path)
    (folder / "myplate_B03_T0002F001L01A01Z02C01.tif").unlink()
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "1 listed files are missing",
                                        "myplate_B03_T0002F001L01A01Z02C01.tif", "missing: zeros")
    assert ingest(cli, folder, tmp_path / "z.zarr", "missing=zeros")[0] == 0
    assert zarr.open_array(str(tmp_path / "z.zarr" / "B" / "03" / "0" / "0"))[0, 1].max() == 0
    attrs = json.loads((tmp_path / "z.zarr" / "B" / "03" / "0" / "zarr.json").read_text())["attributes"]
    assert attrs["zarrmill"]["missing_planes"] == ["myplate_B03_T0002F001L01A01Z02C01.tif"]


def test_extra_unlisted_image(cli, tmp_path):
    folder = cv_folder(tmp_path)
    tifffile.imwrite(folder / "myplate_B03_T0002F003L01A01Z01C01.tif", np.zeros(SMALL, np.uint16))
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "not listed in this metadata",
                                        "F003")


def test_shape_and_dtype_mismatch_between_fields(cli, tmp_path):
    folder = cv_folder(tmp_path)
    tifffile.imwrite(folder / "myplate_B03_T0002F002L01A01Z01C01.tif", np.zeros((54, 65), np.uint16))
    tifffile.imwrite(folder / "myplate_B03_T0002F001L01A01Z01C01.tif", np.zeros(SMALL, np.uint8))
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "2 files differ", "54x65 uint16",
                                        "54x64 uint8")


def test_unknown_pattern_field(cli, tmp_path):
    write_imagexpress(tmp_path / "raw")
    code, _, err = ingest(cli, tmp_path / "raw", tmp_path / "p.zarr", "pattern={well}_{site}.tif")
    assert_one_line_and_no_valid_output(code, err, tmp_path / "p.zarr", "unknown field {site}", "{field}")


def test_output_exists_with_other_parameters(cli, tmp_path):
    folder = cv_folder(tmp_path)
    assert ingest(cli, folder, tmp_path / "p.zarr")[0] == 0
    code, _, err = ingest(cli, folder, tmp_path / "p.zarr", "ngff_version=0.4")
    assert code == 2 and "other parameters" in err and "ngff_version" in err
    assert check_store(tmp_path / "p.zarr")[0] == []  # the existing output is untouched and valid


def test_read_plane_into_raw_compressed_truncated_and_mismatched(tmp_path):
    """Uncompressed TIFFs are read straight into the buffer, others decoded; a truncated file or
    a plane of another shape/dtype is one clear error naming the file."""
    import tifffile

    from zarrmill.errors import InputError
    from zarrmill.io.readers.planes import _read_raw_tiff, read_plane_into

    plane = np.arange(37 * 53, dtype="uint16").reshape(37, 53)
    tifffile.imwrite(tmp_path / "raw.tif", plane)
    tifffile.imwrite(tmp_path / "zlib.tif", plane, compression="zlib")
    out = np.zeros_like(plane)
    assert _read_raw_tiff(tmp_path / "raw.tif", out) and np.array_equal(out, plane)
    out[...] = 0
    assert not _read_raw_tiff(tmp_path / "zlib.tif", out)
    read_plane_into(tmp_path / "zlib.tif", out)
    assert np.array_equal(out, plane)
    data = (tmp_path / "raw.tif").read_bytes()
    (tmp_path / "cut.tif").write_bytes(data[: len(data) - 500])
    with pytest.raises(InputError, match="cut.tif"):
        read_plane_into(tmp_path / "cut.tif", out)
    with pytest.raises(InputError, match=r"raw.tif: .*expected \(37, 54\)"):
        read_plane_into(tmp_path / "raw.tif", np.zeros((37, 54), "uint16"))


def test_a_plane_is_read_into_its_place_in_a_wider_canvas(tmp_path, monkeypatch):
    """A well's FOV plane goes straight into its rows of the canvas (a strided view, one preadv
    call per 1024 rows, here forced to 7 so the batches and their seams are exercised): the canvas
    around it is untouched, and a truncated file is one clear error naming it."""
    import tifffile

    from zarrmill.errors import InputError
    from zarrmill.io.readers import planes

    monkeypatch.setattr(planes, "_IOV_MAX", 7)
    plane = np.random.default_rng(0).integers(0, 65535, (37, 53), dtype="uint16")
    tifffile.imwrite(tmp_path / "raw.tif", plane)
    canvas = np.full((50, 120), 7, "uint16")
    into = canvas[5:42, 60:113]
    assert not into.flags.c_contiguous
    assert planes._read_raw_tiff(tmp_path / "raw.tif", into)
    expected = np.full((50, 120), 7, "uint16")
    expected[5:42, 60:113] = plane
    assert np.array_equal(canvas, expected)
    data = (tmp_path / "raw.tif").read_bytes()
    (tmp_path / "cut.tif").write_bytes(data[: len(data) - 500])
    with pytest.raises(InputError, match="cut.tif"):
        planes.read_plane_into(tmp_path / "cut.tif", canvas[5:42, 60:113])


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "x1"])
def test_a_position_that_is_not_a_finite_number_is_refused(cli, tmp_path, bad):
    write_imagexpress(tmp_path / "raw")
    csv_path = tmp_path / "raw" / "positions.csv"
    lines = csv_path.read_text().splitlines()
    well, field, _, y = lines[1].split(",")
    lines[1] = ",".join([well, field, bad, y])
    csv_path.write_text("\n".join(lines) + "\n")
    code, _, err = ingest(cli, tmp_path / "raw", tmp_path / "p.zarr", "pattern={plate}_{well}_s{field}_w{channel}.tif",
                          f"positions={csv_path}", "pixel_size=[0.5,0.5]")
    assert code == 2 and "positions.csv:2:" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p.zarr").exists()


@pytest.mark.parametrize("layout", ["fov", "well"])
def test_1536_wells_named_as_fractal_names_them_on_request(cli, tmp_path, layout):
    mlf, mrf, shrink = VARIANTS["1536"]
    folder, _ = cellvoyager_folder(tmp_path / "raw", mlf, mrf, shrink)
    for names, out in (("plate", "grid.zarr"), ("fractal", "fractal.zarr")):
        code, _, err = ingest(cli, folder, tmp_path / out, f"well_names={names}", f"layout={layout}")
        assert code == 0, err
    grid = json.loads((tmp_path / "grid.zarr" / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    fractal = json.loads((tmp_path / "fractal.zarr" / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    # the instrument's well B03.a1: row 5, column 9 of the 32 x 48 grid; Fractal: row Ba, column 031
    assert [w["path"] for w in grid["wells"]] == ["E/09"]
    assert [w["path"] for w in fractal["wells"]] == ["Ba/031"]
    assert [r["name"] for r in fractal["rows"]][:5] == ["Aa", "Ab", "Ac", "Ad", "Ba"] and len(fractal["rows"]) == 32
    assert [c["name"] for c in fractal["columns"]][:5] == ["011", "012", "013", "014", "021"]
    assert len(fractal["columns"]) == 48
    # fractal-tasks-core's own inverse (get_filename_well_id): row[0] + col[:2] + "." + row[1] + col[2]
    row, col = fractal["wells"][0]["path"].split("/")
    assert f"{row[0]}{col[:2]}.{row[1]}{col[2]}" == "B03.a1"
    for plate in ("grid.zarr", "fractal.zarr"):
        validate_store(tmp_path / plate)
        assert check_store(tmp_path / plate)[0] == []
    image = "0" if layout == "fov" else "well"
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "grid.zarr" / "E" / "09" / image / "0"))[:],
                                  zarr.open_array(str(tmp_path / "fractal.zarr" / "Ba" / "031" / image / "0"))[:])
