"""Damaged and inconsistent inputs, as users have them: each is one line naming the file (and the
field or position), exit code 2, no traceback, on every executor (they are caught while planning,
before any worker starts), and nothing is left behind."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import forget_ownership, zarrmill_subprocess

IMAGE = ["--set", "shape=[2,8,32,32]", "--set", "axes=czyx", "--set", "chunks=[1,4,16,16]"]


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bad")
    proc = zarrmill_subprocess("task", "generate", "--executor", "sync", "--set", f"output={base / 'img.zarr'}", *IMAGE)
    assert proc.returncode == 0, proc.stderr
    forget_ownership(base / "img.zarr")
    return base / "img.zarr"


def _edit_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _ms(doc: dict) -> dict:
    return doc["attributes"]["ome"]["multiscales"][0]


def _drop_axis_everywhere(doc: dict) -> None:
    ms = _ms(doc)
    ms["axes"] = ms["axes"][1:]
    for ds in ms["datasets"]:
        for ct in ds["coordinateTransformations"]:
            for key in ("scale", "translation"):
                if key in ct:
                    ct[key] = ct[key][1:]


def _damage(kind: str, img: Path, work: Path) -> tuple[list[str], str]:
    """(extra --set parameters, what the message must name)."""
    if kind == "truncated-group-json":
        (img / "zarr.json").write_bytes((img / "zarr.json").read_bytes()[:60])
        return [], "zarr.json: not valid JSON at line"
    if kind == "truncated-array-json":
        (img / "0" / "zarr.json").write_bytes((img / "0" / "zarr.json").read_bytes()[:30])
        return [], "0/zarr.json: not valid JSON"
    if kind == "binary-json":
        (img / "zarr.json").write_bytes(b"\x00\xff\xfe garbage")
        return [], "zarr.json"
    if kind == "axes-vs-scale":
        _edit_json(img / "zarr.json", lambda d: _ms(d).__setitem__("axes", _ms(d)["axes"][1:]))
        return [], "scale of 4 values but multiscales lists 3 axes"
    if kind == "axes-vs-array":
        _edit_json(img / "zarr.json", _drop_axis_everywhere)
        return [], "4 dimensions [2, 8, 32, 32] but multiscales lists 3 axes"
    if kind == "no-datasets":
        _edit_json(img / "zarr.json", lambda d: _ms(d).__setitem__("datasets", []))
        return [], "multiscales has no datasets"
    if kind == "group-not-array":
        shutil.rmtree(img / "0")
        (img / "0").mkdir()
        (img / "0" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
        return [], "a zarr group, not an array"
    if kind == "scale-zero":
        _edit_json(img / "zarr.json", lambda d: _ms(d)["datasets"][0]["coordinateTransformations"][0]
                   .__setitem__("scale", [1.0, 1.0, 0.0, 1.0]))
        return [], "must hold positive finite numbers"
    if kind == "translation-text":
        _edit_json(img / "zarr.json", lambda d: _ms(d)["datasets"][0]["coordinateTransformations"].append(
            {"type": "translation", "translation": [0, 0, "x", 0]}))
        return [], "is not a list of numbers"
    raise AssertionError(kind)


KINDS = ["truncated-group-json", "truncated-array-json", "binary-json", "axes-vs-scale", "axes-vs-array",
         "no-datasets", "group-not-array", "scale-zero", "translation-text"]
TASKS = {
    "rechunk": lambda img, out: ["--set", f"input={img}", "--set", f"output={out}"],
    "pyramid": lambda img, out: ["--set", f"input={img}", "--set", "min_size=8"],
    "compress": lambda img, out: ["--set", f"input={img}", "--set", f"output={out}", "--set", "patch=[4,8,8]",
                                  "--set", "format=zarr"],
}


def _run_bad(image: Path, tmp_path: Path, kind: str, task: str, executor: list[str], **kw):
    img = tmp_path / "img.zarr"
    shutil.copytree(image, img)
    extra, words = _damage(kind, img, tmp_path)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    proc = zarrmill_subprocess("task", task, *executor, *TASKS[task](img, tmp_path / "out"), *extra, **kw)
    return proc, words, before


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("executor", ["sync", "threads", "local"])
def test_a_damaged_image_is_one_line_on_every_executor(image, tmp_path, kind, task, executor):
    proc, words, before = _run_bad(image, tmp_path, kind, task, ["--executor", executor])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) <= 3 and "Traceback" not in proc.stderr, proc.stderr
    assert words in lines[-1] and str(tmp_path / "img.zarr") in lines[-1], lines[-1]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before, "nothing left behind"


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["truncated-group-json", "axes-vs-array"])
def test_a_damaged_image_is_one_line_on_slurm_too(image, tmp_path, slurm, kind):
    env = dict(os.environ, DASK_JOBQUEUE__SLURM__QUEUE=slurm)  # the user's jobqueue config
    proc, words, before = _run_bad(image, tmp_path, kind, "rechunk", ["--executor", "slurm"], env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert words in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("content,words", [
    ("z,y,x\n1,2,3\n4,5\n", "points.csv:3: 2 values"),
    ("z,y,x\n1,2,three\n", "points.csv:2:"),
    ("a,b,c\n1,2,3\n", "points.csv:1: missing columns"),
    ("", "no header and no points"),
])
def test_bad_points_files_name_the_line(image, tmp_path, content, words):
    (tmp_path / "points.csv").write_text(content)
    proc = zarrmill_subprocess("task", "patch-extract", "--executor", "sync", "--set", f"input={image}",
                               "--set", f"output={tmp_path / 'p.zarr'}", "--set", f"points={tmp_path / 'points.csv'}",
                               "--set", "cuboid=[2,4,4]")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr
    assert not (tmp_path / "p.zarr").exists()


def test_whitespace_separated_points_are_read(image, tmp_path):
    (tmp_path / "points.txt").write_text("z y x\n4 16 16\n2 8 8\n")
    proc = zarrmill_subprocess("task", "patch-extract", "--executor", "sync", "--set", f"input={image}",
                               "--set", f"output={tmp_path / 'p.zarr'}", "--set", f"points={tmp_path / 'points.txt'}",
                               "--set", "cuboid=[2,4,4]")
    assert proc.returncode == 0, proc.stderr
    import zarr

    assert zarr.open_array(str(tmp_path / "p.zarr" / "patches")).shape[0] == 2


def test_a_cellfinder_xml_with_a_bad_type_names_it(image, tmp_path):
    (tmp_path / "cells.xml").write_text(
        "<CellCounter_Marker_File><Marker_Data><Marker_Type><Type>abc</Type><Marker><MarkerX>1</MarkerX>"
        "<MarkerY>2</MarkerY><MarkerZ>3</MarkerZ></Marker></Marker_Type></Marker_Data></CellCounter_Marker_File>")
    proc = zarrmill_subprocess("task", "patch-extract", "--executor", "sync", "--set", f"input={image}",
                               "--set", f"output={tmp_path / 'p.zarr'}", "--set", f"points={tmp_path / 'cells.xml'}",
                               "--set", "cuboid=[2,4,4]")
    assert proc.returncode == 2 and "cells.xml: Marker_Type has Type 'abc'" in proc.stderr, proc.stderr


def test_an_unexpected_error_is_one_line_and_the_traceback_needs_debug(tmp_path):
    arr = tmp_path / "weird.npy"
    np.save(arr, np.zeros((2, 2), dtype=object), allow_pickle=True)
    proc = zarrmill_subprocess("task", "compress", "--executor", "sync", "--set", f"input={arr}",
                               "--set", f"output={tmp_path / 'o'}", "--set", "patch=[2,2]")
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _file_case(kind: str, work: Path) -> tuple[list[str], str]:
    """(ingest --set parameters, what the one line must say) for inputs and outputs the file system
    or the pixels make impossible."""
    ok = work / "ok.npy"
    np.save(ok, np.ones((4, 8, 8), np.uint16))
    out = f"output={work / 'out.zarr'}"
    if kind == "structured-dtype":
        np.save(work / "s.npy", np.zeros((4, 8, 8), dtype=[("a", "u1"), ("b", "f4")]))
        return [f"input={work / 's.npy'}", out], "is not bool, integer or float"
    if kind == "complex-dtype":
        np.save(work / "c.npy", np.ones((4, 8, 8), np.complex64))
        return [f"input={work / 'c.npy'}", out], "complex64 is not bool, integer or float"
    if kind == "empty-axis":
        np.save(work / "e.npy", np.zeros((0, 8, 8), np.uint16))
        return [f"input={work / 'e.npy'}", out], "has an empty axis"
    if kind == "fifo":
        os.mkfifo(work / "f.npy")
        return [f"input={work / 'f.npy'}", out, "format=image"], "not a regular file"
    if kind == "input-symlink-loop":
        os.symlink(work / "loop", work / "loop")
        return [f"input={work / 'loop'}", out], "symlink loop"
    if kind == "output-symlink-loop":
        os.symlink(work / "oloop", work / "oloop")
        return [f"input={ok}", f"output={work / 'oloop' / 'x.zarr'}"], "symlink loop"
    if kind == "output-name-too-long":
        return [f"input={ok}", f"output={work / ('a' * 300)}.zarr"], "too long"
    if kind == "output-under-a-file":
        (work / "notes.txt").write_text("a file, not a folder")
        return [f"input={ok}", f"output={work / 'notes.txt'}/x.zarr"], "not a folder"
    if kind == "zero-pixel-size":
        return [f"input={ok}", out, "pixel_size=[0,1,1]"], "pixel_size.0: Input should be greater than 0"
    if kind == "corrupt-tiff-in-series":
        raw = work / "raw"
        raw.mkdir()
        import tifffile

        tifffile.imwrite(raw / "A01_s1.tif", np.ones((8, 8), np.uint16))
        (raw / "A01_s2.tif").write_bytes(b"II*\x00garbage")
        return [f"input={raw}", out, "pattern={well}_s{field}.tif"], "A01_s2.tif: cannot read"
    raise AssertionError(kind)


FILE_CASES = ["structured-dtype", "complex-dtype", "empty-axis", "fifo", "input-symlink-loop", "output-symlink-loop",
              "output-name-too-long", "output-under-a-file", "zero-pixel-size", "corrupt-tiff-in-series"]


@pytest.mark.parametrize("kind", FILE_CASES)
def test_impossible_files_and_paths_are_one_line_and_leave_nothing(tmp_path, kind):
    from adversarial_world import changes, snapshot

    sets, words = _file_case(kind, tmp_path)
    before = snapshot(tmp_path)
    args = ["task", "ingest", "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    proc = zarrmill_subprocess(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    assert changes(before, snapshot(tmp_path)) == []


CELLVOYAGER_EDITS = [
    ("MeasurementData.mlf", 'FieldIndex="1"', 'FieldIndex="x"', "bts:FieldIndex='x' in <bts:MeasurementRecord> is not a whole number"),
    ("MeasurementData.mlf", r'X="[^"]*"', 'X="nan"', "bts:X='nan' in <bts:MeasurementRecord> must be a finite number"),
    ("MeasurementData.mlf", 'Column="3"', 'Column="99"', "outside the 8 x 12 plate"),
    ("MeasurementData.mlf", r'Time="[^"]*"', 'Time="yesterday"', "bts:Time='yesterday' is not an ISO date"),
    ("MeasurementDetail.mrf", r'HorizontalPixelDimension="[^"]*"', 'HorizontalPixelDimension="0"',
     "bts:HorizontalPixelDimension='0' in <bts:MeasurementChannel> must be a number > 0"),
    ("MeasurementDetail.mrf", r'RowCount="[^"]*"', 'RowCount="-2"', "bts:RowCount=-2 in <bts:MeasurementDetail> must be at least 1"),
]


@pytest.mark.parametrize("name,pattern,replacement,words", CELLVOYAGER_EDITS,
                         ids=["field-text", "x-nan", "column-outside", "time-text", "pixel-0", "rows-negative"])
def test_bad_cellvoyager_metadata_is_one_line_naming_file_attribute_and_value(tmp_path, name, pattern, replacement,
                                                                              words):
    import re

    from adversarial_world import changes, snapshot

    raw = tmp_path / "raw"
    proc = zarrmill_subprocess("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                               "--set", "wells=[B03]", "--set", "grid=[1,2]", "--set", "shape=[16,24]")
    assert proc.returncode == 0, proc.stderr
    text = (raw / name).read_text()
    edited = re.sub(pattern, replacement, text, count=1)
    assert edited != text
    (raw / name).write_text(edited)
    before = snapshot(tmp_path)
    proc = zarrmill_subprocess("task", "ingest", "--executor", "sync", "--set", f"input={raw}",
                               "--set", f"output={tmp_path / 'plate.zarr'}")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr and name in proc.stderr, proc.stderr
    assert changes(before, snapshot(tmp_path)) == []
