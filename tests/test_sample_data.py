"""``zarrmill sample-data NAME DEST`` (#50): each sample is written in seconds and read by the task
its getting-started page runs on it (the pages themselves run as pasted in test_manual.py); DEST
must be new or empty, and a second call into it is refused with exit 2 and changes nothing; an
unknown name is one line naming the closest."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from adversarial_world import changes, snapshot
from conftest import require

from zarrmill.runtime.front.sample_data import CASES, NNUNET_PATCH, PLATE, PLATE_FORMATS, VOLUME, samples


def test_without_arguments_it_lists_every_sample_with_a_line_and_its_size(cli):
    code, out, _ = cli("sample-data")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert set(samples()) <= set(rows)
    assert {f"plate-{f}" for f in PLATE_FORMATS} | {"organ-points", "training-cases", "nnunet-preprocessed"} \
        == set(samples())
    assert all(" MB " in rows[name] for name in samples())
    assert all(s.megabytes < 10 for s in samples().values())  # a few MB at most


@pytest.mark.parametrize("fmt", list(PLATE_FORMATS))
def test_each_instrument_plate_is_read_by_ingest(cli, tmp_path, fmt):
    import zarr

    dest = tmp_path / "raw"
    code, out, err = cli("sample-data", f"plate-{fmt}", dest)
    assert code == 0, err
    assert "try: zarrmill task ingest" in out
    plate = tmp_path / "plate.ome.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={dest}", "--set", f"output={plate}",
                       "--set", "layout=well", "--set", "min_size=32")
    assert code == 0, err
    assert cli("check", plate)[0] == 0
    wells = zarr.open_group(str(plate), mode="r").attrs["ome"]["plate"]["wells"]
    assert sorted(w["path"].replace("/", "") for w in wells) == sorted(PLATE["wells"])
    image = zarr.open_array(str(plate / "B" / "03" / "well" / "0"), mode="r")
    assert image.shape[-4:-2] == (PLATE["channels"], PLATE["z_planes"])


def test_the_volume_and_its_points_go_through_patch_extract(cli, tmp_path):
    from zarrmill.io.readers.points import read_points

    dest = tmp_path / "organ"
    assert cli("sample-data", "organ-points", dest)[0] == 0
    points = read_points(dest / "cells.xml")
    assert len(points.zyx) == VOLUME["n_blobs"] and set(points.labels) == {1, 2}
    assert (points.zyx >= 0).all() and (points.zyx < np.array(VOLUME["shape"])).all()
    out = tmp_path / "cuboids.zarr"
    code, _, err = cli("task", "patch-extract", "--executor", "sync", "--set", f"input={dest / 'brain.ome.zarr'}",
                       "--set", f"points={dest / 'cells.xml'}", "--set", f"output={out}", "--set", "cuboid=[8,16,16]",
                       "--set", "edge=drop")
    assert code == 0, err
    assert cli("check", out)[0] == 0


def test_the_training_cases_are_compressed_by_compress(cli, tmp_path):
    dest = tmp_path / "cases"
    assert cli("sample-data", "training-cases", dest)[0] == 0
    files = sorted(dest.iterdir())
    assert [f.name for f in files] == [f"case_{i:03d}.npy" for i in range(CASES["n"])]
    assert all(np.load(f).shape == CASES["shape"] and np.load(f).dtype == np.uint16 for f in files)
    code, _, err = cli("task", "compress", "--executor", "sync", "--set", f"input={dest}",
                       "--set", f"output={tmp_path / 'b2nd'}", "--set", "patch=[32,48,48]")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "b2nd").glob("*.b2nd")) == [f"case_{i:03d}.b2nd" for i in range(3)]


def test_the_nnunet_folder_is_read_by_nnunets_own_dataset_class_and_by_compress(cli, tmp_path):
    dataset = require("nnunetv2.training.dataloading.nnunet_dataset", "nnU-Net's own dataset classes")
    from zarrmill.io.synthetic.nnunet import case_shape, volume

    dest = tmp_path / "nnUNet_preprocessed"
    assert cli("sample-data", "nnunet-preprocessed", dest)[0] == 0
    folder = dest / "Dataset001_Test" / "nnUNetPlans_3d_fullres"
    assert dataset.infer_dataset_class(str(folder)) is dataset.nnUNetDatasetBlosc2
    ds = dataset.nnUNetDatasetBlosc2(str(folder))
    assert sorted(ds.identifiers) == ["case_000", "case_001", "case_002"]
    data, seg, _, props = ds.load_case("case_001")
    expected = volume(case_shape("3d_fullres", 1), 1, "ct")
    np.testing.assert_array_equal(np.asarray(data[0]), expected)
    assert seg.dtype == np.int8 and seg.shape == (1, *expected.shape) and props["case"] == 1
    assert pickle.loads((folder / "case_001.pkl").read_bytes())["shape_before_cropping"] == list(expected.shape)
    out = tmp_path / "pre" / folder.name
    code, _, err = cli("task", "compress", "--executor", "sync", "--set", f"input={folder}", "--set", f"output={out}")
    assert code == 0, err
    assert f"Patch size {NNUNET_PATCH}" in (out / "zarrmill" / "layout.md").read_text()  # from the plans file
    assert dataset.infer_dataset_class(str(out)) is dataset.nnUNetDatasetBlosc2


@pytest.mark.parametrize("name", ["plate-cellvoyager", "training-cases"])
def test_a_second_call_into_the_same_dest_is_refused_and_changes_nothing(cli, tmp_path, name):
    dest = tmp_path / "sample"
    dest.mkdir()  # an empty folder is fine
    assert cli("sample-data", name, dest)[0] == 0
    before = snapshot(tmp_path)
    code, out, err = cli("sample-data", name, dest)
    assert code == 2 and not out
    assert err.count("\n") == 1 and "exists and is not empty" in err and str(dest) in err
    assert changes(before, snapshot(tmp_path)) == []


def test_a_file_as_dest_is_refused(cli, tmp_path):
    (tmp_path / "f").write_text("mine")
    code, _, err = cli("sample-data", "plate-cq", tmp_path / "f")
    assert code == 2 and "is a file" in err and (tmp_path / "f").read_text() == "mine"


@pytest.mark.parametrize("typo, closest", [("cellvoyager", "plate-cellvoyager"), ("nnunet", "nnunet-preprocessed"),
                                           ("organ", "organ-points"), ("plate-operrta", "plate-operetta")])
def test_an_unknown_name_is_one_line_with_the_closest(cli, tmp_path, typo, closest):
    code, out, err = cli("sample-data", typo, tmp_path / "new")
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"did you mean {closest!r}" in err
    assert not (tmp_path / "new").exists()
