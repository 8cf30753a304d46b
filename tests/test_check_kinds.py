"""Every task runs on small generated data; ``zarrmill check`` then passes each output and names its
kind, and zarr-python walks each zarr output without a warning and without a bookkeeping node (#27).
Each kind's contract can fail: a small defect planted in a copy makes check exit 1 naming it."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import bookkeeping

from zarrmill.runtime.front.cli import main

OUTPUTS = {  # output -> (kind check names, task, --set values)
    "img.ome.zarr": ("image", "generate", ["shape=[8,64,64]", "n_blobs=10"]),
    "img04.ome.zarr": ("image", "generate", ["shape=[8,64,64]", "n_blobs=10", "ngff_version=0.4"]),
    "lab.ome.zarr": ("labels", "generate", ["shape=[8,64,64]", "n_blobs=10", "kind=labels"]),
    "re.ome.zarr": ("image", "rechunk", ["input={img.ome.zarr}", "chunks=[4,32,32]"]),
    "cv": ("instrument folder", "generate-plate", ["shape=[64,80]", "wells=[B03]", "z_planes=2"]),
    "plate.ome.zarr": ("plate", "ingest", ["input={cv}"]),
    "wells.ome.zarr": ("well plate", "ingest", ["input={cv}", "layout=well"]),
    "resh.ome.zarr": ("well plate", "reshard", ["input={plate.ome.zarr}"]),
    "b2": ("compressed .b2nd set", "compress", ["input={cases}", "patch=[8,16,16]"]),
    "cz.zarr": ("compressed zarr set", "compress", ["input={cases}", "patch=[8,16,16]", "format=zarr"]),
    "tune": ("tune results", "tune", ["input={cases}", "patch=[8,16,16]", "seconds=1", "layouts=[zarrmill]"]),
    "grid.zarr": ("patch store", "patch-extract", ["input={img.ome.zarr}", "mode=grid", "tile=[4,32,32]"]),
    "random.zarr": ("patch store", "patch-extract", ["input={img.ome.zarr}", "mode=random",
                                                    "cuboid=[4,16,16]", "n_patches=10"]),
    "points.zarr": ("patch store", "patch-extract", ["input={img.ome.zarr}", "points={pts.csv}",
                                                    "cuboid=[2,8,8]"]),
    "cc": ("cluster-check results", "cluster-check", ["units=3"]),
    "rebare.zarr": ("zarr array", "rechunk", ["input={bare.zarr}", "chunks=[4,16,16]"]),
}
IN_PLACE = {  # tasks that add to a store: (store, kind after, task, --set values)
    "pyramid": ("img.ome.zarr", "image", "pyramid", ["input={img.ome.zarr}", "min_size=16"]),
    "labels": ("img.ome.zarr", "image", "labels", ["input={mask.npy}", "image={img.ome.zarr}"]),
}


def run(*args: str) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    (root / "cases").mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(root / "cases" / f"case_{i}.npy", rng.integers(0, 100, (1, 16, 32, 32)).astype("float32"))
    np.save(root / "mask.npy", (rng.random((8, 64, 64)) > 0.5).astype("uint16"))
    (root / "pts.csv").write_text("z,y,x\n4,30,30\n2,10,10\n")
    bare = zarr.create_array(str(root / "bare.zarr"), shape=(8, 32, 32), chunks=(8, 8, 8), dtype="uint16")
    bare[...] = rng.integers(0, 1000, (8, 32, 32)).astype("uint16")  # a bare array, no OME metadata

    def fill(value: str) -> str:  # "{name}" -> that output's path in this world
        for name in list(OUTPUTS) + ["cases", "mask.npy", "pts.csv", "bare.zarr"]:
            value = value.replace("{" + name + "}", str(root / name))
        return value

    for out, (_, task, sets) in OUTPUTS.items():
        args = ["task", task, "--executor", "sync", "--set", f"output={root / out}"]
        for s in sets:
            args += ["--set", fill(s)]
        assert run(*args) == 0, (out, task)
    for name, (_, _, task, sets) in IN_PLACE.items():
        args = ["task", task, "--executor", "sync"]
        for s in sets:
            args += ["--set", fill(s)]
        assert run(*args) == 0, name
    return root


def check_json(cli, path: Path) -> tuple[int, dict]:
    code, out, _ = cli("check", "--json", path)
    return code, json.loads(out)


@pytest.mark.parametrize("out", sorted(OUTPUTS) + ["img.ome.zarr/labels/cells"])
def test_check_passes_every_output_and_names_its_kind(cli, world, out):
    kind = OUTPUTS[out][0] if out in OUTPUTS else "labels"
    code, doc = check_json(cli, world / out)
    assert (code, doc["problems"], doc["kind"]) == (0, [], kind)
    code, text, _ = cli("check", world / out)
    assert code == 0 and f": ok ({kind}, " in text


def test_in_place_tasks_leave_an_image_check_passes(cli, world):
    code, doc = check_json(cli, world / "img.ome.zarr")
    assert (code, doc["kind"]) == (0, "image")
    ms = zarr.open_group(str(world / "img.ome.zarr"), mode="r").attrs["ome"]["multiscales"][0]
    assert len(ms["datasets"]) >= 2  # pyramid added levels
    assert (world / "img.ome.zarr" / "labels" / "cells").is_dir()  # labels added a label image


ZARR_OUTPUTS = [o for o in sorted(OUTPUTS) if OUTPUTS[o][0] not in  # groups (a bare array has no members)
                ("instrument folder", "tune results", "cluster-check results", "compressed .b2nd set", "zarr array")]


@pytest.mark.parametrize("out", ZARR_OUTPUTS + ["img.ome.zarr"])
def test_zarr_python_walks_every_output_without_a_warning_or_a_bookkeeping_node(world, out):
    """Warnings are errors, with no exception: a patch store's points table is zarr columns
    (``table/``), not a file zarr-python would warn about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        group = zarr.open_group(str(world / out), mode="r")
        names = [name for name, _ in group.members(max_depth=None)]
        group.tree()
    messages = [str(w.message) for w in caught]
    assert messages == [], messages
    assert names and not [n for n in names if "zarrmill" in n or n.split("/")[-1].startswith(".")]


def _drop_table_row(path: Path) -> None:
    labels = zarr.open_array(str(path / "table" / "label"), mode="r")[...]
    zarr.create_array(str(path / "table" / "label"), data=labels[:-1], overwrite=True)


def _flip_status(path: Path) -> None:
    status = zarr.open_array(str(path / "table" / "status"), mode="r+")
    status[0] = 1 if status[0] == 0 else 0


def _set_case_shape(path: Path) -> None:
    if (path / "zarrmill" / "compress.json").is_file():  # a .b2nd set
        summary = json.loads((path / "zarrmill" / "compress.json").read_text())
        summary["cases"][0]["shape"][-1] += 1
        (path / "zarrmill" / "compress.json").write_text(json.dumps(summary))
        return
    group = zarr.open_group(str(path), mode="a")  # a zarr set: its root attributes
    ours = dict(group.attrs["zarrmill"])
    ours["compress_set"]["cases"][0]["shape"][-1] += 1
    group.attrs["zarrmill"] = ours


def _damage_b2nd(path: Path) -> None:
    case = path / "case_0.b2nd"
    data = bytearray(case.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = b"\xff" * 64
    case.write_bytes(bytes(data))


def _bad_recommendation(path: Path) -> None:
    (path / "recommended.yaml").write_text("patch: [8, 16, 16]\ncodec: lz5\n")


def _lose_unit_record(path: Path) -> None:
    next((path / "units").glob("*.json")).unlink()


def _lose_plane(path: Path) -> None:
    next(path.glob("*.tif")).unlink()


def _lose_roi_level(path: Path) -> None:
    shutil.rmtree(path / "B" / "03" / "well" / "0")


DEFECTS = {
    "points.zarr": (_drop_table_row, "table/label: 1 rows, not 2"),
    "grid.zarr": (_flip_status, "attributes say"),
    "b2": (_set_case_shape, "records"),
    "cz.zarr": (_set_case_shape, "records"),
    "tune": (_bad_recommendation, "not parameters compress accepts"),
    "cc": (_lose_unit_record, "unit records, the step planned"),
    "cv": (_lose_plane, "missing"),
    "wells.ome.zarr": (_lose_roi_level, "does not exist"),
}


@pytest.mark.parametrize("out", sorted(DEFECTS))
def test_each_contract_fails_on_a_planted_defect(cli, world, tmp_path, out):
    copy = tmp_path / out
    shutil.copytree(world / out, copy, symlinks=True)
    shutil.copytree(bookkeeping(world / out), bookkeeping(copy))  # the ledger: what the step planned
    plant, says = DEFECTS[out]
    plant(copy)
    code, doc = check_json(cli, copy)
    assert code == 1 and doc["kind"] == OUTPUTS[out][0], doc
    assert any(says in p for p in doc["problems"]), doc["problems"]


def test_a_damaged_b2nd_chunk_is_found(cli, world, tmp_path):
    copy = tmp_path / "b2"
    shutil.copytree(world / "b2", copy)
    _damage_b2nd(copy)
    code, doc = check_json(cli, copy)
    assert code == 1 and any("case_0.b2nd: cannot be read" in p for p in doc["problems"]), doc["problems"]


@pytest.mark.parametrize("out, damage", [
    ("points.zarr", lambda d: d["attributes"]["zarrmill"]["patch_store"].update(n="x", patch_size=5)),
    ("img.ome.zarr", lambda d: d["attributes"].update(zarrmill=5)),
])
def test_hand_edited_zarrmill_attributes_are_a_finding_not_a_crash(cli, world, tmp_path, out, damage):
    copy = tmp_path / out
    shutil.copytree(world / out, copy)
    doc = json.loads((copy / "zarr.json").read_text())
    damage(doc)
    (copy / "zarr.json").write_text(json.dumps(doc))
    code, text, err = cli("check", copy)
    assert "please report" not in err and "Traceback" not in err
    if out == "points.zarr":
        assert code == 1 and "its metadata does not have the shape zarrmill writes" in text
    else:
        assert code == 0 and ": ok (image, " in text  # zarrmill's own key is not part of the image


def test_a_b2nd_summary_of_the_wrong_shape_is_one_problem(cli, tmp_path):
    (tmp_path / "b2" / "zarrmill").mkdir(parents=True)
    (tmp_path / "b2" / "zarrmill" / "compress.json").write_text('{"state": "done", "cases": 5}')
    code, text, err = cli("check", tmp_path / "b2")
    assert code == 1 and "the output is damaged" in text and "please report" not in err
