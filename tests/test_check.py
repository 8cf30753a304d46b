"""zarrmill check: the official suites agree with our validator; structural checks catch what the
schemas cannot."""
import json

import pytest
import zarr
from conftest import DATA, bookkeeping
from helpers import generate_step, write_workflow

from zarrmill.io.ngff.conformance import SCHEMA_DIR, check_store, validator

NGFF = DATA / "ngff"


def test_packaged_schemas_are_the_official_ones():
    for version in ("0.4", "0.5"):
        official = sorted((NGFF / version / "schemas").glob("*.schema"))
        assert official
        for path in official:
            assert (SCHEMA_DIR / version / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_official_suites_agree_with_our_validator(version):
    agreed = total = 0
    for suite_path in sorted((NGFF / version / "tests").glob("*_suite.json")):
        suite = json.loads(suite_path.read_text())
        name = suite["schema"]["id"].split("/")[-1].replace(".schema", "")
        for case in suite["tests"]:
            total += 1
            valid = validator(version, name).is_valid(case["data"])
            if valid == case["valid"]:
                agreed += 1
            else:  # the one case JSON Schema cannot express (ngff-spec marks it xfail)
                assert version == "0.5" and "column_before_row" in case.get("formerly", ""), case
    assert total in (92, 86) and total - agreed <= 1


def _image(tmp_path, cli):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "img.zarr")})
    assert cli("run", wf)[0] == 0
    return tmp_path / "img.zarr"


def test_check_ok_and_problems_one_per_line(cli, tmp_path):
    img = _image(tmp_path, cli)
    code, out, _ = cli("check", img)
    assert code == 0 and "ok (image, 1 OME-NGFF groups checked)" in out
    meta = json.loads((img / "zarr.json").read_text())
    meta["attributes"]["ome"]["multiscales"][0]["datasets"].append(
        {"path": "9", "coordinateTransformations": [{"type": "scale", "scale": [1, 4, 1, 1]}]})
    meta["attributes"]["ome"]["multiscales"][0]["axes"][0]["name"] = 5  # must be a string
    (img / "zarr.json").write_text(json.dumps(meta))
    code, out, _ = cli("check", img)
    lines = out.strip().splitlines()
    assert code == 1
    assert any("9: array listed in multiscales does not exist" in line for line in lines)
    assert any("NGFF 0.5 image schema" in line for line in lines)


def test_check_catches_dtype_shape_and_shard_problems(tmp_path):
    root = tmp_path / "bad.zarr"
    g = zarr.open_group(str(root), mode="w", zarr_format=3)
    zarr.create_array(str(root / "0"), shape=(64, 64), chunks=(16, 16), dtype="uint16")
    zarr.create_array(str(root / "1"), shape=(40, 32), chunks=(16, 16), dtype="float32")
    g.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": [
        {"name": "y", "type": "space"}, {"name": "x", "type": "space"}], "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]},
        {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [2, 2]}]}]}]}
    problems, _ = check_store(root)
    assert any("different dtypes" in p for p in problems)
    assert any("level 1 axis 0 has 40 pixels" in p for p in problems)


def test_check_reports_unfinished_step(cli, tmp_path):
    img = _image(tmp_path, cli)
    step = bookkeeping(img) / "steps" / "gen" / "step.json"
    step.write_text(step.read_text().replace('"done"', '"running"'))
    code, out, _ = cli("check", img)
    assert code == 1 and "step 'gen' (generate) is unfinished" in out


def test_check_on_non_store(cli, tmp_path):
    code, _, err = cli("check", tmp_path)  # bad input: one line, exit 2
    assert code == 2 and "not a store" in err and len(err.strip().splitlines()) == 1


def test_check_fails_where_the_plate_reader_fails_on_wells_of_different_widths(cli, tmp_path):
    """Every image passes the schemas, but ome-zarr-py's plate reader tiles each well's first image
    by row and column: wells one above the other must have one width. check opens the plate the
    same way and fails where the reader fails."""
    import numpy as np
    import tifffile
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    raw = tmp_path / "raw"
    raw.mkdir()
    tifffile.imwrite(raw / "A01_s1.tif", np.ones((20, 40), np.uint16))
    tifffile.imwrite(raw / "B01_s1.tif", np.ones((20, 40), np.uint16))
    plate = tmp_path / "p.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={plate}",
                       "--set", "pattern={well}_s{field}.tif")
    assert code == 0, err
    assert check_store(plate)[0] == []
    narrow = plate / "B" / "01" / "0" / "0"  # as another tool might write it: B01 is 30 pixels wide
    arr = zarr.open_array(str(narrow))
    zarr.create_array(str(narrow), shape=arr.shape[:-1] + (30,), dtype=arr.dtype, overwrite=True, zarr_format=3)
    with pytest.raises(ValueError):
        list(Reader(parse_url(str(plate)))())[0].data[0].compute()
    code, out, _ = cli("check", plate)
    assert code == 1 and "ome-zarr-py's Reader" in out and str(plate) in out, out


@pytest.mark.parametrize("key,values,words", [("scale", [1, 1, 0, 1], "positive finite numbers"),
                                              ("scale", [1, 1, -0.5, 1], "positive finite numbers"),
                                              ("translation", [0, 0, "x", 0], "is not a list of numbers")])
def test_check_fails_on_transforms_the_schema_lets_through(cli, tmp_path, key, values, words):
    """The schemas accept a scale of 0 or a negative one (and 0.4 text); no reader can place such pixels."""
    img = _image(tmp_path, cli)
    meta = json.loads((img / "zarr.json").read_text())
    cts = meta["attributes"]["ome"]["multiscales"][0]["datasets"][0]["coordinateTransformations"]
    if key == "scale":
        cts[0]["scale"] = values
    else:
        cts.append({"type": "translation", "translation": values})
    (img / "zarr.json").write_text(json.dumps(meta))
    code, out, _ = cli("check", img)
    assert code == 1 and words in out, out
