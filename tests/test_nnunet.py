"""compress and tune take nnU-Net v2's own preprocessed folders as they are and give back a folder
nnU-Net's dataset classes read unchanged (#28). The folders are written by nnunetv2's own
``save_case`` (installed without torch: its dataset module needs only blosc2 and batchgenerators)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from adversarial_world import changes, snapshot
from conftest import require

from zarrmill.io.synthetic.nnunet import write_preprocessed

_dataset = require("nnunetv2.training.dataloading.nnunet_dataset", "nnU-Net's own dataset classes")
comp_blosc2_params = _dataset.comp_blosc2_params
infer_dataset_class = _dataset.infer_dataset_class
nnUNetDatasetBlosc2 = _dataset.nnUNetDatasetBlosc2
nnUNetDatasetNumpy = _dataset.nnUNetDatasetNumpy

PATCH_3D = [24, 40, 40]
PATCH_2D = [48, 40]


def nnunet_folder(root: Path, config: str, patch: list[int], n: int = 3, writer: str = "b2nd") -> Path:
    """nnUNet_preprocessed/Dataset001_Test/nnUNetPlans_<config>/ written by nnU-Net's own code,
    with the plans file beside it (the cases of ``zarrmill sample-data nnunet-preprocessed``:
    zarrmill.io.synthetic.nnunet)."""

    def save(data, seg, props, target, patch):
        if writer == "npz":
            nnUNetDatasetNumpy.save_case(data, seg, props, target)
        else:
            p3 = patch if len(patch) == 3 else [1] + patch
            blocks, chunks = comp_blosc2_params(data.shape, p3, data.itemsize)
            nnUNetDatasetBlosc2.save_case(data, seg, props, target, chunks=chunks, blocks=blocks)

    return write_preprocessed(root, config, patch, n, save)


def compress(cli, src: Path, out: Path, *sets: str) -> tuple[int, str]:
    args = ["task", "compress", "--executor", "sync", "--set", f"input={src}", "--set", f"output={out}"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    return code, err


def assert_same_cases(original, rewritten) -> None:
    assert sorted(original.identifiers) == sorted(rewritten.identifiers) and original.identifiers
    for ident in original.identifiers:
        d1, s1, _, p1 = original.load_case(ident)
        d2, s2, _, p2 = rewritten.load_case(ident)
        np.testing.assert_array_equal(np.asarray(d1[:]), np.asarray(d2[:]))
        np.testing.assert_array_equal(np.asarray(s1[:]), np.asarray(s2[:]))
        assert pickle.dumps(p1) == pickle.dumps(p2)


@pytest.mark.parametrize("config, patch", [("3d_fullres", PATCH_3D), ("2d", PATCH_2D)])
def test_nnunets_own_folder_goes_through_compress_and_nnunet_reads_it_equal(cli, tmp_path, config, patch):
    src = nnunet_folder(tmp_path / "pre", config, patch)
    before = snapshot(tmp_path / "pre")
    out = tmp_path / "out" / src.name
    code, err = compress(cli, src, out)
    assert code == 0, err
    assert changes(before, snapshot(tmp_path / "pre")) == []  # the input is never modified
    assert infer_dataset_class(str(out)) is nnUNetDatasetBlosc2
    assert_same_cases(nnUNetDatasetBlosc2(str(src)), nnUNetDatasetBlosc2(str(out)))
    for ident in nnUNetDatasetBlosc2.get_identifiers(str(out)):  # properties carried byte for byte
        assert (out / f"{ident}.pkl").read_bytes() == (src / f"{ident}.pkl").read_bytes()
    note = (out / "zarrmill" / "layout.md").read_text()
    assert f"Patch size {patch}" in note and "nnUNetPlans.json" in note
    summary = json.loads((out / "zarrmill" / "compress.json").read_text())
    assert summary["patch"] == patch and summary["nnunet"] is True
    assert cli("check", out)[0] == 0


def test_each_array_gets_zarrmills_layout_for_its_own_dtype(cli, tmp_path):
    import blosc2

    from zarrmill.io.training.b2layout import patch_layout

    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, n=1)
    out = tmp_path / "out"
    assert compress(cli, src, out)[0] == 0
    for name in ("case_000.b2nd", "case_000_seg.b2nd"):
        arr = blosc2.open(str(out / name))
        chunks, blocks = patch_layout(arr.shape, arr.dtype.itemsize, PATCH_3D)
        assert (tuple(arr.chunks), tuple(arr.blocks)) == (chunks, blocks), name
    assert blosc2.open(str(out / "case_000_seg.b2nd")).dtype == np.int8


def test_an_older_npz_folder_becomes_a_b2nd_folder_nnunet_reads_equal(cli, tmp_path):
    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, writer="npz")
    out = tmp_path / "out"
    code, err = compress(cli, src, out)
    assert code == 0, err
    assert infer_dataset_class(str(out)) is nnUNetDatasetBlosc2
    original = nnUNetDatasetNumpy(str(src), identifiers=nnUNetDatasetNumpy.get_identifiers(str(src)))
    rewritten = nnUNetDatasetBlosc2(str(out), identifiers=nnUNetDatasetBlosc2.get_identifiers(str(out)))
    assert_same_cases(original, rewritten)


def test_other_files_nnunet_keeps_there_are_carried_unchanged(cli, tmp_path):
    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, n=1)
    extra = np.arange(7, dtype=np.int16)
    np.save(src / "case_000_extra.npy", extra)  # a .npy nnU-Net's folder scan ignores
    out = tmp_path / "out"
    assert compress(cli, src, out)[0] == 0
    assert (out / "case_000_extra.npy").read_bytes() == (src / "case_000_extra.npy").read_bytes()
    assert infer_dataset_class(str(out)) is nnUNetDatasetBlosc2


def test_patch_comes_from_the_plans_and_is_required_without_them(cli, tmp_path):
    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, n=1)
    (src.parent / "nnUNetPlans.json").unlink()
    code, err = compress(cli, src, tmp_path / "out")
    assert code == 2 and err.strip().splitlines() == [
        "zarrmill: error: patch is required (no plans file beside it names configuration 'nnUNetPlans_3d_fullres'); "
        "e.g. --set patch=[128,128,128]"]
    assert not (tmp_path / "out").exists()
    code, err = compress(cli, src, tmp_path / "out", "patch=[16,32,32]")
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "zarrmill" / "compress.json").read_text())["patch"] == [16, 32, 32]


def test_a_case_without_its_segmentation_is_one_line(cli, tmp_path):
    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, n=2)
    (src / "case_001_seg.b2nd").unlink()
    code, err = compress(cli, src, tmp_path / "out")
    assert code == 2 and err.count("\n") == 1 and "case_001.b2nd: no segmentation case_001_seg.b2nd" in err
    assert not (tmp_path / "out").exists()


def test_tune_measures_nnunets_own_files_as_its_baseline_with_nnunets_reader(cli, tmp_path):
    src = nnunet_folder(tmp_path / "pre", "3d_fullres", PATCH_3D, n=2)
    out = tmp_path / "tune"
    code, _, err = cli("task", "tune", "--executor", "sync", "--set", f"input={src}", "--set", f"output={out}",
                       "--set", "seconds=2", "--set", "layouts=[zarrmill]")
    assert code == 0, err
    import csv

    rows = {r["id"]: r for r in csv.DictReader(open(out / "tune.csv"))}
    own = rows["nnunet-own-files"]
    assert own["layout"] == "nnU-Net's own files" and own["reader"] == "nnunet"
    assert float(own["patches_per_s"]) > 0 and float(own["vs_nnunet_files"]) == 1.0
    assert own["codec"] == "lz4hc"  # what nnunetv2 2.8.1's save_case writes
    cands = [r for i, r in rows.items() if i != "nnunet-own-files"]
    assert cands and all(r["reader"] == "nnunet" and float(r["vs_nnunet_files"]) > 0 for r in cands)
    assert "patch:\n- 24\n- 40\n- 40" in (out / "recommended.yaml").read_text()  # the plans' patch size
