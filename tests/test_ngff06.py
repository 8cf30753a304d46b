"""OME-Zarr 0.6 (0.6rc0): outputs valid against the official 0.6rc0 schemas, fields placed in their
well by a translation from stage positions (the well's scene), 0.6 inputs read back, and the
official 0.6rc0 test suites and examples agreeing with ``zarrmill check``'s validator."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import DATA, zarrmill_subprocess
from hcs_fixtures import cellvoyager_folder
from ngff_official import official_validator, validate_store

from zarrmill.io.ngff.conformance import check_store, schema_problems

SPEC = DATA / "ngff" / "0.6"
KIND_SCHEMA = {"image": "image", "label": "label", "plate": "plate", "well": "well", "scene": "scene",
               "transforms": "ome_zarr"}
MLF, MRF = "metadata_files/MeasurementData_2x2_well.mlf", "metadata_files/MeasurementDetail_2x2_well.mrf"


def _ome(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]["ome"]


@pytest.fixture(scope="module")
def plates(tmp_path_factory) -> dict[str, Path]:
    """The 2x2-site CellVoyager well (fractal-tasks-core's test data) as 0.5 and 0.6 plates."""
    tmp = tmp_path_factory.mktemp("ngff06")
    folder, _ = cellvoyager_folder(tmp / "raw", MLF, MRF, (54, 64))
    out = {}
    for version in ("0.5", "0.6"):
        out[version] = tmp / f"plate{version}.zarr"
        proc = zarrmill_subprocess("task", "ingest", "--executor", "sync", "--set", f"input={folder}",
                                   "--set", f"output={out[version]}", "--set", f"ngff_version={version}")
        assert proc.returncode == 0, proc.stderr
    return out


def _string_io(doc: object) -> bool:
    """A transformation whose input or output is a bare string: the form 0.6.dev4 replaced by
    objects, which the 0.6rc0 schemas reject."""
    if isinstance(doc, dict):
        if doc.get("type") and (isinstance(doc.get("input"), str) or isinstance(doc.get("output"), str)):
            return True
        return any(_string_io(v) for v in doc.values())
    return isinstance(doc, list) and any(_string_io(v) for v in doc)


def _cases(kind_dir: str):
    for path in sorted((SPEC / "tests" / kind_dir).rglob("*.json")):
        rel = path.relative_to(SPEC / "tests" / kind_dir)
        level, verdict, kind = rel.parts[0], rel.parts[1], rel.parts[2]
        marks = []
        try:
            stale = verdict == "valid" and _string_io(json.loads(path.read_text()))
        except ValueError:
            stale = False
        if stale:  # upstream: ten zarr/ copies of valid image cases kept the old form; their attributes/ twins pass
            marks.append(pytest.mark.xfail(strict=True, reason="upstream case still in the 0.6.dev3 string form"))
        yield pytest.param(path, level, verdict == "valid", kind, id=str(rel), marks=marks)


@pytest.mark.parametrize("path,level,valid,kind", list(_cases("attributes")) + list(_cases("zarr")))
def test_the_official_suites_agree_with_the_checker(path, level, valid, kind):
    try:
        doc = json.loads(path.read_text())
    except ValueError:  # one upstream invalid case is not JSON at all: invalid by any reading
        assert not valid
        return
    attrs = doc["attributes"] if "zarr_format" in doc else doc
    named = attrs.get("_conformance", {}).get("schema", {}).get("id")  # the schema the case names
    if not (isinstance(named, str) and named.startswith("schemas/")):  # a few upstream ids are cut short
        named = None
    schema = Path(named).stem if named else ("strict_" if level == "strict" else "") + KIND_SCHEMA[kind]
    assert (schema_problems(attrs, "0.6", schema, path.name) == []) is valid


@pytest.mark.parametrize("path", sorted(p for p in (SPEC / "examples").rglob("*.json") if not p.name.startswith(".")),
                         ids=lambda p: p.name)
def test_the_official_examples_pass_their_base_schema(path):
    config = path.parent / ".config.json"
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    doc = json.loads(text)
    attrs = doc.get("attributes", doc)
    kinds = [name for key, name in (("multiscales", "image"), ("plate", "plate"), ("well", "well"),
                                    ("scene", "scene")) if key in attrs.get("ome", {})]
    if "ome" not in attrs:
        pytest.skip("a fragment of a document (no ome key), shown in the spec's text")
    if not isinstance(attrs["ome"], dict):  # examples/transformations/displacements/multiscales.json
        pytest.skip("upstream example with 'ome' a string, not an object")
    if config.exists():
        # the base schema: some strict examples leave out SHOULDs (metadata, type)
        kinds = [Path(json.loads(config.read_text())["schema"]).stem.removeprefix("strict_")]
    if not all((SPEC / "schemas" / f"{name}.schema").exists() for name in kinds):
        pytest.skip(f"names a schema 0.6rc0 does not ship ({kinds})")
    for name in kinds:
        assert schema_problems(attrs, "0.6", name, path.name) == []


def test_a_06_plate_is_valid_and_places_each_field_by_its_stage_position(plates):
    plate = plates["0.6"]
    counts = validate_store(plate)  # the official 0.6rc0 schemas, loaded by the test itself
    assert counts["plate"] == 1 and counts["well"] == 1 and counts["image"] == 4
    assert check_store(plate)[0] == []
    root = _ome(plate)
    assert root["version"] == "0.6rc0" and "version" not in root["plate"]
    well = _ome(plate / "B" / "03")
    assert "version" not in well["well"]
    assert official_validator("0.6", "scene").is_valid({"ome": well})
    scene = {ct["input"]["path"]: ct for ct in well["scene"]["coordinateTransformations"]}
    assert well["scene"]["coordinateSystems"][0]["name"] == "well"
    # fractal-tasks-core's expected positions for this well (y flipped, relative to the well), in
    # micrometres, as the 0.5 plate's translations hold them
    assert sorted(ct["translation"][-2:] for ct in scene.values()) == [[0.0, 0.0], [0.0, 416.0], [351.0, 0.0],
                                                                       [351.0, 416.0]]
    for image, ct in scene.items():
        assert ct["type"] == "translation" and ct["output"] == {"name": "well"}
        assert ct["input"] == {"path": image, "name": "physical"}
        ms = _ome(plate / "B" / "03" / image)["multiscales"][0]
        assert "axes" not in ms and ms["coordinateSystems"][0]["name"] == "physical"
        (level0,) = ms["datasets"][0]["coordinateTransformations"]
        assert level0 == {"type": "scale", "scale": [1.0, 1.0, 0.1625, 0.1625], "input": {"path": "0"},
                          "output": {"name": "physical"}}  # the place is the well's to say, not the image's
        old = _ome(plates["0.5"] / "B" / "03" / image)["multiscales"][0]["datasets"][0]["coordinateTransformations"]
        translation = next((t["translation"] for t in old if t["type"] == "translation"), [0.0] * 4)
        assert ct["translation"] == translation
        assert np.array_equal(np.asarray(zarr.open_array(plate / "B/03" / image / "0", mode="r")),
                              np.asarray(zarr.open_array(plates["0.5"] / "B/03" / image / "0", mode="r")))


def test_06_inputs_are_read_with_their_fields_placed(plates, tmp_path):
    """reshard composes each well from its fields' places: from 0.6 (the well's scene) as from 0.5."""
    outs = {}
    for version, plate in plates.items():
        outs[version] = tmp_path / f"well{version}.zarr"
        proc = zarrmill_subprocess("task", "reshard", "--executor", "sync", "--set", f"input={plate}",
                                   "--set", f"output={outs[version]}")
        assert proc.returncode == 0, proc.stderr
    a = np.asarray(zarr.open_array(outs["0.5"] / "B/03/well/0", mode="r"))
    b = np.asarray(zarr.open_array(outs["0.6"] / "B/03/well/0", mode="r"))
    assert a.shape == b.shape and np.array_equal(a, b)
    assert _ome(outs["0.6"])["version"] == "0.6rc0"
    validate_store(outs["0.6"])
    assert check_store(outs["0.6"])[0] == []


def test_pyramid_and_labels_on_a_06_plate_keep_it_valid(plates, tmp_path):
    import shutil

    plate = tmp_path / "p.zarr"
    shutil.copytree(plates["0.6"], plate)
    shutil.copytree(plates["0.6"].parent / f".{plates['0.6'].name}.zarrmill", tmp_path / ".p.zarr.zarrmill")
    proc = zarrmill_subprocess("task", "pyramid", "--executor", "sync", "--set", f"input={plate}",
                               "--set", "levels=2", "--set", "min_size=1")
    assert proc.returncode == 0, proc.stderr
    ms = _ome(plate / "B/03/1")["multiscales"][0]
    level1 = ms["datasets"][1]["coordinateTransformations"][0]
    assert level1["type"] == "sequence" and level1["input"] == {"path": "1"}
    shift = level1["transformations"][1]["translation"]
    assert shift[-2:] == [0.08125, 0.08125]  # half a level-0 pixel, not the field's place
    mask = tmp_path / "mask.npy"
    np.save(mask, (np.arange(10 * 54 * 64).reshape(10, 54, 64) % 7 == 0).astype(np.uint8))
    proc = zarrmill_subprocess("task", "labels", "--executor", "sync", "--set", f"image={plate / 'B/03/1'}",
                               "--set", f"input={mask}", "--set", "name=cells", "--set", "axes=zyx")
    assert proc.returncode == 0, proc.stderr
    label = _ome(plate / "B/03/1/labels/cells")
    assert label["version"] == "0.6rc0" and "version" not in label["image-label"]
    validate_store(plate)
    assert check_store(plate)[0] == []


def test_check_reports_a_broken_06_image(plates, tmp_path):
    import shutil

    plate = tmp_path / "p.zarr"
    shutil.copytree(plates["0.6"], plate)
    meta = plate / "B/03/2/zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"]["ome"]["multiscales"][0]["coordinateSystems"]
    meta.write_text(json.dumps(doc))
    problems, _ = check_store(plate)
    assert any(re.search(r"NGFF 0\.6 image schema.*coordinateSystems", p) for p in problems), problems


def test_ngff_zarr_reads_a_06_plate(plates):
    ngff_zarr = pytest.importorskip("ngff_zarr")
    plate = ngff_zarr.from_hcs_zarr(str(plates["0.6"]))
    image = plate.get_well("B", "03").get_image(3)
    want = np.asarray(zarr.open_array(plates["0.6"] / "B/03/3/0", mode="r"))
    assert np.array_equal(np.asarray(image.images[0].data), want)
    assert image.images[0].scale["x"] == 0.1625


def test_a_06_plate_as_ozx(plates, tmp_path):
    folder, _ = cellvoyager_folder(tmp_path / "raw", MLF, MRF, (54, 64))
    archive = tmp_path / "p.ozx"
    proc = zarrmill_subprocess("task", "ingest", "--executor", "sync", "--set", f"input={folder}",
                               "--set", f"output={archive}", "--set", "ngff_version=0.6")
    assert proc.returncode == 0, proc.stderr
    check = zarrmill_subprocess("check", archive)
    assert check.returncode == 0, check.stdout + check.stderr
    import zipfile

    with zipfile.ZipFile(archive) as zf:
        assert json.loads(zf.comment.rstrip(b"\0")) == {"ome": {"version": "0.6rc0"}}
        well = json.loads(zf.read("B/03/zarr.json"))["attributes"]
    assert official_validator("0.6", "well").is_valid(well) and official_validator("0.6", "scene").is_valid(well)
