"""CellVoyager metadata parsing against the values fractal-tasks-core's tests expect
(tests/data/yokogawa-cv7000/README.md), on the real files, unchanged."""
from collections import Counter
from pathlib import Path

import pytest
from hcs_fixtures import CV

from zarrmill.errors import InputError, InputNotFoundError
from zarrmill.io.readers.cellvoyager import read_cellvoyager

MULTIZ = "metadata_files/MeasurementData_SingleWell2Sites_MultiZ.mlf"
DETAIL = "metadata_files/MeasurementDetail.mrf"


def parse(mlf, mrf=DETAIL):
    return read_cellvoyager(CV, mlf, mrf)


def files_per_well(acq):
    return dict(Counter(p.well_name for p in acq.planes))


def test_single_well_two_sites_multi_z():
    acq = parse(MULTIZ)
    assert files_per_well(acq) == {"B03": 4}
    assert list(acq.wells().values()) == [(1, 2)]
    assert sorted({p.x_um for p in acq.planes}) == [-1448.3, -1032.3]
    assert {p.y_um for p in acq.planes} == {-1517.7}
    assert acq.n_z == 2 and acq.z_step == 1.0
    assert acq.pixel_size_yx == (0.1625, 0.1625) and acq.image_shape_yx == (2160, 2560)
    assert acq.bit_depth == 16 and acq.dtype == "uint16"
    assert sorted({p.time for p in acq.planes}) == ["2020-08-12T15:36:36.234+00:00",
                                                     "2020-08-12T15:36:46.322+00:00"]


def test_2x2_well():
    acq = parse("metadata_files/MeasurementData_2x2_well.mlf", "metadata_files/MeasurementDetail_2x2_well.mrf")
    assert files_per_well(acq) == {"B03": 120}
    assert len(acq.wells()[(2, 3)]) == 4 and acq.n_z == 10 and acq.n_c == 3
    assert sorted({p.x_um for p in acq.planes}) == [-1448.3, -1032.3]
    assert sorted({p.y_um for p in acq.planes}) == [-1517.7, -1166.7]


def test_single_z():
    acq = parse("metadata_files/MeasurementData_SingleWell2Sites_SingleZ.mlf")
    assert files_per_well(acq) == {"B03": 2} and acq.n_z == 1 and len(acq.wells()[(2, 3)]) == 2


def test_plate_name_that_looks_like_a_well():
    acq = parse("metadata_files/MeasurementData_SingleWell2Sites_MultiZ_another_well_name_in_plate_name.mlf")
    assert files_per_well(acq) == {"C03": 4, "B03": 4, "D04": 8}
    assert set(acq.wells()) == {(2, 3), (3, 3), (4, 4)}  # B03, C03, D04 by the mlf Row/Column


def test_1536_well_plate():
    acq = parse("syn_1536_images/MeasurementData.mlf", "syn_1536_images/MeasurementDetail.mrf")
    assert files_per_well(acq) == {"B03.a1": 2}
    assert (acq.n_rows, acq.n_cols) == (32, 48) and list(acq.wells()) == [(5, 9)]


def test_overlapping_fields_keep_their_original_positions():
    acq = parse("metadata_files/overlapping_ROIs/MeasurementData.mlf")
    xs = sorted({p.x_um for p in acq.planes})
    assert xs == [-1448.3, -1032.4]  # 415.9 um apart: 0.1 um (< 1 pixel) overlap of 416 um wide fields
    assert xs[1] - xs[0] < 2560 * 0.1625


def test_bad_metadata_is_one_clear_error(tmp_path):
    with pytest.raises(InputNotFoundError, match="mlf file not found"):
        read_cellvoyager(tmp_path)
    (tmp_path / "MeasurementData.mlf").write_text("<not xml")
    (tmp_path / "MeasurementDetail.mrf").write_text((CV / DETAIL).read_text(encoding="utf-8-sig"))
    with pytest.raises(InputError, match="MeasurementData.mlf: not valid XML"):
        read_cellvoyager(tmp_path)


def test_a_measurement_folder_one_or_two_levels_down_is_found(cli, tmp_path):
    """CV8000 and exports nest the measurement folder (mlf, mrf and images) below what users pick."""
    import numpy as np
    import zarr

    raw = tmp_path / "export" / "Plate1" / "20240501_120000"
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                       "--set", "wells=[B03]", "--set", "grid=[1,2]", "--set", "shape=[16,24]")
    assert code == 0, err
    flat = tmp_path / "flat.zarr"
    assert cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={flat}")[0] == 0
    nested = tmp_path / "nested.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'export'}",
                       "--set", f"output={nested}")
    assert code == 0, err
    for field in ("0", "1"):
        np.testing.assert_array_equal(zarr.open_array(str(nested / "B" / "03" / field / "0"))[:],
                                      zarr.open_array(str(flat / "B" / "03" / field / "0"))[:])
    # a second measurement beside it: which one is meant is the user's call
    import shutil

    shutil.copytree(raw, tmp_path / "export" / "Plate1" / "20240502_080000")
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'export'}",
                       "--set", f"output={tmp_path / 'again.zarr'}")
    assert code == 2 and "2 measurement folders hold MeasurementData.mlf" in err, err


def test_generate_plate_writes_what_a_cv7000_mrf_holds(cli, tmp_path):
    import xml.etree.ElementTree as ET

    raw = tmp_path / "raw"
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", "wells=[B03]",
                       "--set", "grid=[2,3]", "--set", "z_planes=4", "--set", "channels=2", "--set", "shape=[16,24]")
    assert code == 0, err
    ns = "{http://www.yokogawa.co.jp/BTS/BTSSchema/1.0}"
    ours = ET.parse(raw / "MeasurementDetail.mrf").getroot()
    real = ET.parse(CV / "metadata_files" / "MeasurementDetail.mrf").getroot()
    assert set(real.attrib) <= set(ours.attrib), set(real.attrib) - set(ours.attrib)
    plate_real, plate_ours = real.find(f"{ns}MeasurementSamplePlate"), ours.find(f"{ns}MeasurementSamplePlate")
    assert set(plate_real.attrib) <= set(plate_ours.attrib)
    channel_real = real.find(f"{ns}MeasurementChannel")
    assert all(set(channel_real.attrib) <= set(c.attrib) for c in ours.findall(f"{ns}MeasurementChannel"))
    assert ours.get(f"{ns}FieldCount") == "6" and ours.get(f"{ns}ZCount") == "4"
    assert ours.get(f"{ns}RowCount") == "8" and ours.get(f"{ns}ColumnCount") == "12"


def test_channel_names_and_colours_come_from_the_measurement_settings(cli, tmp_path):
    import json

    raw = tmp_path / "raw"
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", "wells=[B03]",
                       "--set", "grid=[1,1]", "--set", "channels=2", "--set", "shape=[16,24]", "--set", "plate=P1")
    assert code == 0, err
    (raw / "P1.mes").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementSetting xmlns:bts="http://www.yokogawa.co.jp/BTS/'
        'BTSSchema/1.0" bts:Version="1.0"><bts:Timelapse><bts:Timeline bts:Color="#FF123456"/></bts:Timelapse>'
        '<bts:ChannelList><bts:Channel bts:Ch="1" bts:Target="Nuclei" bts:Fluorophore="DAPI" bts:Color="#FF0070FF"/>'
        '<bts:Channel bts:Ch="2" bts:Target="Actin" bts:Color="#FF00FF00"/></bts:ChannelList></bts:MeasurementSetting>')
    out = tmp_path / "p.zarr"
    assert cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}")[0] == 0
    omero = json.loads((out / "B" / "03" / "0" / "zarr.json").read_text())["attributes"]["ome"]["omero"]
    assert [(c["label"], c["color"]) for c in omero["channels"]] == [("Nuclei DAPI", "0070FF"), ("Actin", "00FF00")]


# -- what instruments write, read as written (#24 defects) -------------------------------------------
def _plate(cli, root: Path) -> Path:
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={root}", "--set", "wells=[B03]",
                       "--set", "grid=[1,2]", "--set", "shape=[16,24]", "--set", "z_planes=2", "--set", "channels=1")
    assert code == 0, err
    return root


def test_a_record_in_a_subfolder_of_the_measurement_folder_is_read(cli, tmp_path):
    """A CQ3000 names Projection/W....tif: a relative path inside the folder is what it wrote."""
    from zarrmill.io.readers.cellvoyager import read_cellvoyager

    raw = _plate(cli, tmp_path / "raw")
    name = sorted(raw.glob("*F002*Z02*.tif"))[0].name
    (raw / "Projection").mkdir()
    (raw / name).rename(raw / "Projection" / name)
    mlf = raw / "MeasurementData.mlf"
    mlf.write_text(mlf.read_text().replace(f">{name}<", f">Projection/{name}<"))
    acq = read_cellvoyager(raw)
    assert str(raw.resolve() / "Projection" / name) in {p.path for p in acq.planes}
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}",
                       "--set", f"output={tmp_path / 'p.zarr'}")
    assert code == 0, err
    mlf.write_text(mlf.read_text().replace(f">Projection/{name}<", f">Projection/../../{name}<"))
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}",
                       "--set", f"output={tmp_path / 'q.zarr'}")
    assert code == 2 and "must be a path inside" in err


def test_two_records_for_one_plane_are_refused_naming_both(cli, tmp_path):
    raw = _plate(cli, tmp_path / "raw")
    mlf = raw / "MeasurementData.mlf"
    lines = mlf.read_text().splitlines(keepends=True)
    record = next(line for line in lines if "F001L01A01Z01C01" in line)
    dup = record.replace("F001L01A01Z01C01.tif", "F001L01A01Z01C01-again.tif")
    mlf.write_text("".join(lines[:-1]) + dup + lines[-1])
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}",
                       "--set", f"output={tmp_path / 'p.zarr'}", "--set", "allow_extra_files=true")
    assert code == 2 and err.count("\n") == 1 and "one plane, two files" in err
    assert "Z01C01.tif" in err and "Z01C01-again.tif" in err
    assert not (tmp_path / "p.zarr").exists()


def test_the_z_step_comes_from_each_fields_own_stack(cli, tmp_path, capsys):
    """Fields focused 0.2 um apart, each a 1 um stack: the z step is 1, not the 0.2 between the two
    lowest z positions of all records; fields that disagree are a warning."""
    from zarrmill.io.readers.cellvoyager import read_cellvoyager

    raw = _plate(cli, tmp_path / "raw")
    mlf = raw / "MeasurementData.mlf"
    text = mlf.read_text()
    shifted = [line.replace('bts:Z="0.0"', 'bts:Z="0.2"').replace('bts:Z="1.0"', 'bts:Z="1.2"')
               if 'bts:FieldIndex="2"' in line else line for line in text.splitlines(keepends=True)]
    mlf.write_text("".join(shifted))
    capsys.readouterr()
    assert read_cellvoyager(raw).z_step == 1.0
    assert "z steps differ" not in capsys.readouterr().err
    mlf.write_text(mlf.read_text().replace('bts:Z="1.2"', 'bts:Z="2.2"'))  # field 2 now steps 2 um
    read_cellvoyager(raw)
    assert "fields' z steps differ (1..2 micrometer)" in capsys.readouterr().err
