"""Axes and units: every OME-NGFF space and time unit is read and written; OME-TIFF sizes in any
length unit become micrometer; RGB(A) inputs get a c axis; an explicit axes parameter wins."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from helpers import run_task as run
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store
from zarrmill.io.ngff.units import SPACE_UM, TIME_S




def ome(store: Path) -> dict:
    return json.loads((store / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]


def test_the_unit_tables_are_the_specs():
    from ome_zarr.axes import KNOWN_SPATIAL_UNITS, KNOWN_TEMPORAL_UNITS

    assert set(SPACE_UM) == set(KNOWN_SPATIAL_UNITS) and set(TIME_S) == set(KNOWN_TEMPORAL_UNITS)
    assert SPACE_UM["nanometer"] == pytest.approx(1e-3) and SPACE_UM["millimeter"] == pytest.approx(1e3)
    assert SPACE_UM["angstrom"] == pytest.approx(1e-4) and TIME_S["millisecond"] == pytest.approx(1e-3)


@pytest.mark.parametrize("unit,size,expected", [("nm", 325.0, 0.325), ("mm", 0.002, 2.0), ("Å", 5000.0, 0.5),
                                                ("µm", 0.65, 0.65), ("cm", 1e-4, 1.0)])
def test_ome_tiff_sizes_in_any_length_unit_become_micrometer(cli, tmp_path, unit, size, expected):
    vol = np.arange(4 * 16 * 20, dtype=np.uint16).reshape(4, 16, 20)
    tifffile.imwrite(tmp_path / "v.ome.tif", vol, metadata={
        "axes": "ZYX", "PhysicalSizeX": size, "PhysicalSizeXUnit": unit, "PhysicalSizeY": size,
        "PhysicalSizeYUnit": unit, "PhysicalSizeZ": 1.0, "PhysicalSizeZUnit": "µm"})
    code, err = run(cli, "ingest", f"input={tmp_path / 'v.ome.tif'}", f"output={tmp_path / 'v.zarr'}")
    assert code == 0, err
    scale = ome(tmp_path / "v.zarr")["datasets"][0]["coordinateTransformations"][0]["scale"]
    assert scale == pytest.approx([1.0, expected, expected])
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "v.zarr" / "0"))[:], vol)


def test_an_ome_tiff_size_in_pixels_warns_and_keeps_scale_one(cli, tmp_path):
    tifffile.imwrite(tmp_path / "p.ome.tif", np.ones((16, 20), np.uint16),
                     metadata={"axes": "YX", "PhysicalSizeX": 3.0, "PhysicalSizeXUnit": "pixel"})
    code, err = run(cli, "ingest", f"input={tmp_path / 'p.ome.tif'}", f"output={tmp_path / 'p.zarr'}")
    assert code == 0 and "'pixel' is not a length" in err and "Traceback" not in err, err
    assert ome(tmp_path / "p.zarr")["datasets"][0]["coordinateTransformations"][0]["scale"][-1] == 1.0


def test_rgb_inputs_get_a_channel_axis_and_axes_overrides_the_guess(cli, tmp_path):
    rgb = np.random.default_rng(0).integers(0, 255, (40, 50, 3), dtype=np.uint8)
    np.save(tmp_path / "rgb.npy", rgb)
    tifffile.imwrite(tmp_path / "rgb.tif", rgb, photometric="rgb")
    for name in ("rgb.npy", "rgb.tif"):
        out = tmp_path / f"{name}.zarr"
        code, err = run(cli, "ingest", f"input={tmp_path / name}", f"output={out}")
        assert code == 0, err
        assert [a["name"] for a in ome(out)["axes"]] == ["c", "y", "x"]
        np.testing.assert_array_equal(zarr.open_array(str(out / "0"))[:], np.moveaxis(rgb, -1, 0))
        assert ("read as an RGB image" in err) == (name == "rgb.npy"), err  # the TIFF says it is RGB
    code, err = run(cli, "ingest", f"input={tmp_path / 'rgb.npy'}", f"output={tmp_path / 'vol.zarr'}", "axes=zyx")
    assert code == 0 and "RGB" not in err, err
    assert [a["name"] for a in ome(tmp_path / "vol.zarr")["axes"]] == ["z", "y", "x"]


@pytest.mark.parametrize("space,time", [("nanometer", "millisecond"), ("millimeter", "minute"),
                                        ("angstrom", "second"), ("inch", "hour")])
def test_images_in_any_ngff_unit_rechunk_and_pyramid_keeping_their_units(cli, tmp_path, space, time):
    image = tmp_path / "img.zarr"
    code, err = run(cli, "generate", f"output={image}", "shape=[2,8,32,32]", "axes=tzyx", "n_blobs=5")
    assert code == 0, err
    meta_path = image / "zarr.json"
    meta = json.loads(meta_path.read_text())
    for axis in meta["attributes"]["ome"]["multiscales"][0]["axes"]:
        axis["unit"] = time if axis["type"] == "time" else space
    meta_path.write_text(json.dumps(meta))
    out = tmp_path / "copy.zarr"
    assert run(cli, "rechunk", f"input={image}", f"output={out}", "chunks=[1,4,16,16]")[0] == 0
    assert run(cli, "pyramid", f"input={out}", "min_size=8")[0] == 0
    axes = ome(out)["axes"]
    assert [a.get("unit") for a in axes] == [time, space, space, space]
    validate_store(out)
    assert check_store(out)[0] == []


def test_patch_voxel_sizes_follow_the_images_unit(cli, tmp_path):
    """An image in nanometer (500 nm voxels) and a network at 1 um: cuboids are cut at twice the
    network size in voxels and resampled, as for the same image in micrometer."""
    image = tmp_path / "img.zarr"
    assert run(cli, "generate", f"output={image}", "shape=[16,64,64]", "pixel_size=[0.5,0.5,0.5]")[0] == 0
    meta_path = image / "zarr.json"
    meta = json.loads(meta_path.read_text())
    ms = meta["attributes"]["ome"]["multiscales"][0]
    for axis in ms["axes"]:
        axis["unit"] = "nanometer"
    for ds in ms["datasets"]:
        ds["coordinateTransformations"][0]["scale"] = [v * 1000 for v in ds["coordinateTransformations"][0]["scale"]]
    meta_path.write_text(json.dumps(meta))
    np.save(tmp_path / "pts.npy", np.array([[8.0, 32.0, 32.0]]))
    out = tmp_path / "patches.zarr"
    code, err = run(cli, "patch-extract", f"input={image}", f"output={out}", f"points={tmp_path / 'pts.npy'}",
                    "cuboid=[2,4,4]", "network_voxel_size=[1.0,1.0,1.0]")
    assert code == 0, err
    info = zarr.open_group(str(out), mode="r").attrs["zarrmill"]["patch_store"]
    assert info["voxel_size"] == pytest.approx([0.5, 0.5, 0.5])
    assert zarr.open_array(str(out / "patches")).shape[-3:] == (2, 4, 4)
