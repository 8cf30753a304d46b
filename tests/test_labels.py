"""Label masks into an image's labels/: the NGFF label layout readers use, mode pyramids, the
image left as it was, bad masks refused in one line with nothing written."""
from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from adversarial_world import changes, snapshot
from conftest import forget_ownership
from helpers import run_task as run
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store




def mask(shape: tuple[int, ...]) -> np.ndarray:
    """Labels in 2x2-aligned blocks, plus a minority label in the first pixel of some blocks:
    ``mode`` keeps the block's majority where ``nearest`` would take that pixel."""
    m = np.zeros(shape, np.uint32)
    m[..., 8:24, 8:24] = 5
    m[..., 32:60, 4:20] = 7
    m[..., 40:44, 40:64] = 9
    m[..., 10:22:2, 10:22:2] = 3  # one pixel of 4 in these blocks: never the mode
    return m


def block_mode(labels: np.ndarray) -> np.ndarray:
    """The majority label of each 2x2 block in y, x (the mask's blocks have one clear majority)."""
    z, y, x = labels.shape
    blocks = labels.reshape(z, y // 2, 2, x // 2, 2).transpose(0, 1, 3, 2, 4).reshape(z, y // 2, x // 2, 4)
    out = np.empty(blocks.shape[:3], labels.dtype)
    for index in np.ndindex(*out.shape):
        values, counts = np.unique(blocks[index], return_counts=True)
        out[index] = values[counts.argmax()]
    return out


@pytest.mark.parametrize("version", ["0.5", "0.4"])
def test_a_mask_becomes_labels_that_readers_open_with_a_mode_pyramid(cli, tmp_path, version):
    from napari_ome_zarr import napari_get_reader
    from ngio import open_ome_zarr_container

    image = tmp_path / "img.zarr"
    assert run(cli, "generate", f"output={image}", "shape=[6,64,64]", "pixel_size=[2,0.5,0.5]",
               f"ngff_version={version}")[0] == 0
    before = {k: v for k, v in snapshot(image).items() if not k.startswith(".zarrmill") and not k.endswith(("json", ".zattrs"))}
    ngff_before = zarr.open_group(str(image), mode="r").attrs.get("ome") or dict(zarr.open_group(str(image)).attrs)
    labels = mask((6, 64, 64))
    np.save(tmp_path / "mask.npy", labels)
    code, err = run(cli, "labels", f"input={tmp_path / 'mask.npy'}", f"image={image}", "name=nuclei", "min_size=16")
    assert code == 0, err
    after = snapshot(image)
    assert {k: after.get(k) for k in before} == before, "the image's arrays are untouched"
    ngff_after = zarr.open_group(str(image), mode="r").attrs.get("ome") or dict(zarr.open_group(str(image)).attrs)
    assert {k: v for k, v in ngff_after.items() if k not in ("zarrmill", "labels")} == \
        {k: v for k, v in ngff_before.items() if k != "zarrmill"}, "its metadata only gains provenance"
    validate_store(image)
    assert check_store(image)[0] == []
    level0 = np.asarray(zarr.open_array(str(image / "labels" / "nuclei" / "0")))
    np.testing.assert_array_equal(level0, labels)
    level1 = np.asarray(zarr.open_array(str(image / "labels" / "nuclei" / "1")))
    np.testing.assert_array_equal(level1, block_mode(labels))  # mode; z kept (2 um vs 0.5 um pixels)
    assert not np.array_equal(level1, labels[:, ::2, ::2])  # the mask tells mode from nearest
    container = open_ome_zarr_container(str(image))
    assert container.list_labels() == ["nuclei"]
    np.testing.assert_array_equal(container.get_label("nuclei").get_as_numpy(), labels)
    layers = napari_get_reader(str(image))(str(image))
    found = [data for data, _, kind in layers if kind == "labels"]
    assert len(found) == 1 and np.array_equal(np.asarray(found[0][0]), labels)


def test_labels_for_a_plate_field_keep_the_plate_valid(cli, tmp_path):
    raw = tmp_path / "raw"
    assert run(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[1,2]", "shape=[32,48]")[0] == 0
    plate = tmp_path / "plate.zarr"
    assert run(cli, "ingest", f"input={raw}", f"output={plate}")[0] == 0
    field = plate / "B" / "03" / "1"
    shape = zarr.open_array(str(field / "0")).shape  # c, z, y, x
    labels = np.zeros(shape[1:], np.uint16)
    labels[:, 4:12, 6:30] = 3
    np.save(tmp_path / "m.npy", labels)
    code, err = run(cli, "labels", f"input={tmp_path / 'm.npy'}", f"image={field}", "min_size=8")
    assert code == 0, err
    validate_store(plate)
    assert check_store(plate)[0] == []
    meta = json.loads((field / "labels" / "cells" / "zarr.json").read_text())["attributes"]["ome"]
    image_meta = json.loads((field / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    ours = meta["multiscales"][0]["datasets"][0]["coordinateTransformations"]
    theirs = image_meta["datasets"][0]["coordinateTransformations"]
    assert ours[0]["scale"] == theirs[0]["scale"][1:], "the label lies on the image's pixels"
    assert meta["image-label"]["source"] == {"image": "../../"}


@pytest.mark.parametrize("kind,words", [("shape", "does not match image"), ("float", "holds integers"),
                                        ("foreign-name", "not created by zarrmill")])
def test_bad_masks_are_one_line_and_write_nothing(cli, tmp_path, kind, words):
    image = tmp_path / "img.zarr"
    assert run(cli, "generate", f"output={image}", "shape=[4,32,32]")[0] == 0
    labels = mask((4, 64, 64))[:, :32, :32]
    if kind == "shape":
        labels = labels[:, :16]
    if kind == "float":
        labels = labels.astype(np.float32)
    np.save(tmp_path / "m.npy", labels)
    extra = []
    if kind == "foreign-name":  # another tool's label image of that name
        assert run(cli, "labels", f"input={tmp_path / 'm.npy'}", f"image={image}")[0] == 0
        forget_ownership(image)
        (image / "labels" / "cells" / "0").rename(image / "labels" / "cells" / "theirs")
        extra = ["--overwrite"]
    before = snapshot(tmp_path)
    code, _, err = cli("task", "labels", "--executor", "sync", "--set", f"input={tmp_path / 'm.npy'}",
                       "--set", f"image={image}", *extra)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert changes(before, snapshot(tmp_path)) == []
