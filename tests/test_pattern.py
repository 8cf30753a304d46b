"""Pattern ingest on folders as instruments and people write them: missing planes, two files for
one plane, UUIDs after the site number (ImageXpress), widths and expressions in placeholders,
placeholders in folder names (TimePoint_N/ZStep_N)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from zarrmill.io.readers.pattern import compile_pattern


def ingest(cli, raw: Path, out: Path, pattern: str, *extra: str) -> tuple[int, str]:
    args = ["task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}",
            "--set", f"pattern={pattern}"]
    for e in extra:
        args += ["--set", e]
    code, _, err = cli(*args)
    return code, err


def plane(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, (8, 12), dtype=np.uint16)


def write(raw: Path, names: dict[str, int]) -> None:
    for name, seed in names.items():
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        tifffile.imwrite(raw / name, plane(seed))


def test_a_missing_plane_is_an_error_listing_it_or_zeros_recorded(cli, tmp_path):
    raw = tmp_path / "raw"
    write(raw, {"A01_s1_w1.tif": 1, "A01_s1_w2.tif": 2, "A01_s2_w1.tif": 3})  # A01 s2 lacks w2
    code, err = ingest(cli, raw, tmp_path / "p.zarr", "{well}_s{field}_w{channel}.tif")
    assert code == 2 and "1 planes are missing from the series" in err, err
    assert "well A01 field 2 channel 2" in err and not (tmp_path / "p.zarr").exists()
    code, err = ingest(cli, raw, tmp_path / "p.zarr", "{well}_s{field}_w{channel}.tif", "missing=zeros")
    assert code == 0, err
    image = tmp_path / "p.zarr" / "A" / "01" / "1"
    data = zarr.open_array(str(image / "0"))[:]
    np.testing.assert_array_equal(data[0, 0], plane(3))
    assert not data[1].any(), "the missing channel is zeros"
    meta = json.loads((image / "zarr.json").read_text())["attributes"]
    assert any("well A01 field 2 channel 2" in m for m in meta["zarrmill"]["missing_planes"]), meta["zarrmill"]


def test_two_files_for_one_plane_name_both(cli, tmp_path):
    raw = tmp_path / "raw"
    write(raw, {"A01_s1_w1.tif": 1, "A01_s01_w1.tif": 2})
    code, err = ingest(cli, raw, tmp_path / "p.zarr", "{well}_s{field}_w{channel}.tif")
    assert code == 2 and "A01_s01_w1.tif and A01_s1_w1.tif are the same plane" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_width_keeps_a_uuid_out_of_the_site_number(cli, tmp_path):
    """ImageXpress puts a UUID after the wavelength: ``Plate_B03_s1_w1<UUID>.tif``."""
    raw = tmp_path / "raw"
    write(raw, {"Plate_B03_s1_w1A1B2C3D4-1111-2222-3333-444455556666.tif": 1,
                "Plate_B03_s1_w29F8E7D6C-1111-2222-3333-444455556666.tif": 2,
                "Plate_B03_s2_w10AB3C4D5-1111-2222-3333-444455556666.tif": 3,
                "Plate_B03_s2_w2FFEEDDCC-1111-2222-3333-444455556666.tif": 4})
    code, err = ingest(cli, raw, tmp_path / "p.zarr", "{plate}_{well}_s{field}_w{channel:1}{any}.tif")
    assert code == 0, err
    for field, seeds in ((0, (1, 2)), (1, (3, 4))):
        data = zarr.open_array(str(tmp_path / "p.zarr" / "B" / "03" / str(field) / "0"))[:]
        assert data.shape[0] == 2
        for c, seed in enumerate(seeds):
            np.testing.assert_array_equal(data[c, 0], plane(seed))


def test_expressions_and_widths_in_placeholders():
    regex = compile_pattern("{well:[A-P][0-9]{2}}_s{field:2}_w{channel}.tif")
    m = regex.match("B03_s07_wDAPI.tif")
    assert m and m["well"] == "B03" and m["field"] == "07" and m["channel"] == "DAPI"
    assert regex.match("Q03_s07_wDAPI.tif") is None and regex.match("B03_s7_wDAPI.tif") is None


@pytest.mark.parametrize("pattern,words", [("{well:[A-P}_s{field}.tif", "not a regular expression"),
                                           ("{well:(?P<x>A)}_{field}.tif", "may not name groups"),
                                           ("{well_s{field}.tif", "is never closed"),
                                           ("{wel}_s{field}.tif", "unknown field {wel}"),
                                           ("../{well}_s{field}.tif", "may not use '..'")])
def test_bad_placeholders_are_one_line(cli, tmp_path, pattern, words):
    raw = tmp_path / "raw"
    write(raw, {"A01_s1.tif": 1})
    code, err = ingest(cli, raw, tmp_path / "p.zarr", pattern)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_placeholders_in_folder_names(cli, tmp_path):
    """MetaXpress: ``TimePoint_<t>/ZStep_<z>/<plate>_<well>_s<site>_w<wavelength>.tif``."""
    raw = tmp_path / "raw"
    names = {f"TimePoint_{t}/ZStep_{z}/P_A01_s1_w{c}.tif": 100 * t + 10 * z + c
             for t in (1, 2) for z in (1, 2, 3) for c in (1, 2)}
    write(raw, names)
    write(raw, {"P_A01_s1_w1_thumb.tif": 999})  # thumbnails beside the folders are not matched
    code, err = ingest(cli, raw, tmp_path / "p.zarr", "TimePoint_{t}/ZStep_{z}/{plate}_{well}_s{field}_w{channel}.tif")
    assert code == 0, err
    data = zarr.open_array(str(tmp_path / "p.zarr" / "A" / "01" / "0" / "0"))[:]
    assert data.shape[:3] == (2, 2, 3)  # t, c, z
    for t in (1, 2):
        for z in (1, 2, 3):
            for c in (1, 2):
                np.testing.assert_array_equal(data[t - 1, c - 1, z - 1], plane(100 * t + 10 * z + c))
