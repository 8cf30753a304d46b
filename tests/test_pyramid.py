"""pyramid on real stores: dtypes, labels, odd shapes vs an independent reference, transforms."""
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import tree_digest
from helpers import write_workflow
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store


def make_image(cli, path: Path, shape, axes, dtype="uint16", kind="blobs", chunks=None, version="0.5",
               pixel_size=None):
    params = {"output": str(path), "shape": list(shape), "axes": axes, "dtype": dtype, "kind": kind,
              "n_blobs": 40, "blob_radius": 5.0, "ngff_version": version}
    if chunks:
        params["chunks"] = list(chunks)
    if pixel_size:
        params["pixel_size"] = pixel_size
    wf = write_workflow(path.parent / f"{path.name}.yaml", {"gen": {"task": "generate", "params": params}})
    code, _, err = cli("run", wf)
    assert code == 0, err


def pyramid(cli, path: Path, *sets):
    args = ["task", "pyramid", "--set", f"input={path}", "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def multiscales(path: Path):
    meta = path / "zarr.json"
    if meta.exists():
        return json.loads(meta.read_text())["attributes"]["ome"]["multiscales"][0]
    return json.loads((path / ".zattrs").read_text())["multiscales"][0]


def reference_mean(x: np.ndarray, f: tuple[int, ...]) -> np.ndarray:
    """Independent reference: pad with NaN to whole blocks, reshape, nanmean, round half to even."""
    padded_shape = [math.ceil(n / k) * k for n, k in zip(x.shape, f)]
    pad = np.full(padded_shape, np.nan)
    pad[tuple(slice(0, n) for n in x.shape)] = x
    shape = []
    for n, k in zip(padded_shape, f):
        shape += [n // k, k]
    blocks = pad.reshape(shape)
    mean = np.nanmean(blocks, axis=tuple(range(1, 2 * len(f), 2)))
    return np.rint(mean).astype(x.dtype) if x.dtype.kind in "ui" else mean.astype(x.dtype)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
def test_dtype_of_every_level_equals_level_0(cli, tmp_path, dtype):
    img = tmp_path / "img.zarr"
    make_image(cli, img, (2, 24, 200, 150), "czyx", dtype=dtype, pixel_size=[1.0, 0.5, 0.5])
    assert pyramid(cli, img, "min_size=32")[0] == 0
    ms = multiscales(img)
    assert len(ms["datasets"]) >= 3
    for ds in ms["datasets"]:
        assert zarr.open_array(str(img / ds["path"])).dtype == np.dtype(dtype)
    validate_store(img)
    assert check_store(img)[0] == []


def test_odd_shape_against_reference_and_transforms(cli, tmp_path):
    img = tmp_path / "odd.zarr"
    make_image(cli, img, (1001, 777), "yx", chunks=(256, 256), pixel_size=[0.5, 0.25])
    before = tree_digest(img / "0")
    assert pyramid(cli, img, "min_size=64")[0] == 0
    ms = multiscales(img)
    shapes = [zarr.open_array(str(img / ds["path"])).shape for ds in ms["datasets"]]
    assert shapes == [(1001, 777), (501, 389), (251, 195), (126, 98), (63, 49)]
    expected = np.asarray(zarr.open_array(str(img / "0"))[:])
    for level in range(1, len(shapes)):
        expected = reference_mean(expected, (2, 2))
        np.testing.assert_array_equal(zarr.open_array(str(img / str(level)))[:], expected)
    cts = [{c["type"]: c[c["type"]] for c in ds["coordinateTransformations"]} for ds in ms["datasets"]]
    assert cts[1]["scale"] == [1.0, 0.5] and cts[1]["translation"] == [0.25, 0.125]
    assert cts[2]["scale"] == [2.0, 1.0] and cts[2]["translation"] == [0.75, 0.375]
    assert tree_digest(img / "0") == before, "level 0 must never be rewritten"


def test_labels_keep_only_values_present_at_level_0(cli, tmp_path):
    img = tmp_path / "labels.zarr"
    make_image(cli, img, (16, 90, 70), "zyx", dtype="uint16", kind="labels", pixel_size=[0.5, 0.5, 0.5])
    assert pyramid(cli, img, "min_size=8")[0] == 0  # auto -> mode for image-label images
    level0 = set(np.unique(zarr.open_array(str(img / "0"))[:]))
    assert len(level0) > 10
    ms = multiscales(img)
    for ds in ms["datasets"][1:]:
        values = set(np.unique(zarr.open_array(str(img / ds["path"]))[:]))
        assert values <= level0
    # isotropic voxels: z shrinks with y and x
    assert zarr.open_array(str(img / "1")).shape == (8, 45, 35)
    # level 1 is the 2x2x2 block mode (smallest label on a tie), block by block
    x = np.asarray(zarr.open_array(str(img / "0"))[:])
    want = np.empty((8, 45, 35), x.dtype)
    for index in np.ndindex(*want.shape):
        block = x[tuple(slice(2 * i, 2 * i + 2) for i in index)].ravel()
        labels, counts = np.unique(block, return_counts=True)
        want[index] = labels[counts == counts.max()].min()
    np.testing.assert_array_equal(zarr.open_array(str(img / "1"))[:], want)
    assert "image-label" in json.loads((img / "zarr.json").read_text())["attributes"]["ome"]
    validate_store(img)


CODEC = {"cname": "zstd", "clevel": 1, "shuffle": "bitshuffle", "blocksize": 2**20}


def _blosc(path: Path) -> dict:
    """The Blosc settings of a stored array, as its metadata file says them (v2 or v3)."""
    if (path / ".zarray").exists():
        cfg = json.loads((path / ".zarray").read_text())["compressor"]
        return {"cname": cfg["cname"], "clevel": cfg["clevel"], "shuffle": {0: "noshuffle", 1: "shuffle",
                2: "bitshuffle"}[cfg["shuffle"]], "blocksize": cfg["blocksize"]}
    codecs = json.loads((path / "zarr.json").read_text())["codecs"]
    codecs = next((c["configuration"]["codecs"] for c in codecs if c["name"] == "sharding_indexed"), codecs)
    cfg = next(c["configuration"] for c in codecs if c["name"] == "blosc")
    return {k: cfg[k] for k in CODEC}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_new_levels_keep_level_0s_blosc_settings(cli, tmp_path, version):
    """The default codec of new levels is level 0's, read from the stored array of either zarr
    format (a v2 level 0's settings were lost: levels came out zstd clevel 5, shuffle, Blosc's
    own blocks)."""
    img = tmp_path / "img.zarr"
    wf = write_workflow(tmp_path / "gen.yaml", {"gen": {"task": "generate", "params": {
        "output": str(img), "shape": [16, 512, 512], "axes": "zyx", "dtype": "uint16", "ngff_version": version,
        "codec": CODEC}}})
    assert cli("run", wf)[0] == 0
    assert _blosc(img / "0") == CODEC
    assert pyramid(cli, img, "min_size=64")[0] == 0
    levels = [ds["path"] for ds in multiscales(img)["datasets"]]
    assert len(levels) >= 3
    assert [_blosc(img / level) for level in levels] == [CODEC] * len(levels)


def test_chunks_do_not_shrink_and_low_levels_are_few_files(cli, tmp_path):
    img = tmp_path / "img.zarr"
    make_image(cli, img, (1, 2048, 2048), "zyx", chunks=(1, 256, 256))
    assert pyramid(cli, img, "min_size=64", "shard_mb=4")[0] == 0
    for ds in multiscales(img)["datasets"][1:]:
        arr = zarr.open_array(str(img / ds["path"]))
        assert math.prod(arr.chunks) >= min(256 * 256, math.prod(arr.shape))
        files = [f for f in (img / ds["path"]).rglob("*") if f.is_file() and f.name != "zarr.json"]
        assert len(files) <= 4, (ds["path"], len(files))


def fractal_like_plate(root: Path, levels: int = 3):
    """A Fractal-style 0.4 plate on zarr v2: B/03/0 with czyx, translations, `levels` levels."""
    rng = np.random.default_rng(3)
    zarr.open_group(str(root), mode="w", zarr_format=2).attrs.update({"plate": {
        "version": "0.4", "rows": [{"name": "B"}], "columns": [{"name": "03"}],
        "wells": [{"path": "B/03", "rowIndex": 0, "columnIndex": 0}], "acquisitions": [{"id": 0}]}})
    zarr.open_group(str(root / "B"), mode="w", zarr_format=2)
    zarr.open_group(str(root / "B" / "03"), mode="w", zarr_format=2).attrs.update(
        {"well": {"version": "0.4", "images": [{"path": "0", "acquisition": 0}]}})
    img = zarr.open_group(str(root / "B" / "03" / "0"), mode="w", zarr_format=2)
    data = rng.integers(0, 3000, size=(1, 3, 216, 256), dtype=np.uint16)
    datasets = []
    for k in range(levels):
        level = data[..., :: 2**k, :: 2**k]
        arr = img.create_array(str(k), shape=level.shape, chunks=(1, 1, 216, 256), dtype="uint16")
        arr[:] = level
        datasets.append({"path": str(k), "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 1.0, 0.1625 * 2**k, 0.1625 * 2**k]},
            {"type": "translation", "translation": [0.0, 0.0, 351.0, 0.0]}]})
    axes = [{"name": "c", "type": "channel"}] + [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    channel = {"label": "DAPI", "color": "00FFFF", "window": {"min": 0, "max": 65535, "start": 0, "end": 3000}}
    img.attrs.update({"multiscales": [{"version": "0.4", "axes": axes, "datasets": datasets}],
                      "omero": {"channels": [channel] * 3}})
    return data


def test_fractal_written_04_plate(cli, tmp_path):
    plate = tmp_path / "fractal.zarr"
    data = fractal_like_plate(plate)
    level0 = tree_digest(plate / "B" / "03" / "0" / "0")
    code, _, err = pyramid(cli, plate, "min_size=32")
    assert code == 2 and "already has 3 levels" in err and "--overwrite" in err
    before = tree_digest(plate, skip_ledger=False)
    code, _, err = cli("task", "pyramid", "--set", f"input={plate}", "--set", "min_size=32", "--executor",
                       "sync", "--overwrite")
    # levels another tool wrote are never replaced, --overwrite or not; nothing was touched
    assert code == 2 and "not written by zarrmill" in err, err
    assert tree_digest(plate, skip_ledger=False) == before
    for level in ("1", "2"):  # as a user would: move the foreign levels away, then build them
        shutil.rmtree(plate / "B" / "03" / "0" / level)
    attrs_path = plate / "B" / "03" / "0" / ".zattrs"
    attrs = json.loads(attrs_path.read_text())
    attrs["multiscales"][0]["datasets"] = attrs["multiscales"][0]["datasets"][:1]
    attrs_path.write_text(json.dumps(attrs))
    code, _, err = pyramid(cli, plate, "min_size=32")
    assert code == 0, err
    ms = multiscales(plate / "B" / "03" / "0")
    assert len(ms["datasets"]) == 4
    assert ms["datasets"][0]["coordinateTransformations"][1]["translation"] == [0.0, 0.0, 351.0, 0.0]
    assert ms["datasets"][1]["coordinateTransformations"][1]["translation"] == [0.0, 0.0, 351.08125, 0.08125]
    np.testing.assert_array_equal(zarr.open_array(str(plate / "B/03/0/1"))[:],
                                  reference_mean(data, (1, 1, 2, 2)))
    assert tree_digest(plate / "B" / "03" / "0" / "0") == level0
    attrs = json.loads((plate / "B" / "03" / "0" / ".zattrs").read_text())
    assert attrs["omero"]["channels"][0]["label"] == "DAPI"
    validate_store(plate)
    assert check_store(plate)[0] == []


def test_blosc_choosing_the_shuffle_is_read_as_what_it_chooses(cli, tmp_path):
    """A v2 level 0 written elsewhere with Blosc's automatic shuffle (-1): bitshuffle for 1-byte
    items, as Blosc itself chooses, so the new levels compress as level 0 does."""
    img = tmp_path / "img.zarr"
    make_image(cli, img, (4, 512, 512), "zyx", dtype="uint8", version="0.4")
    meta = json.loads((img / "0" / ".zarray").read_text())
    meta["compressor"]["shuffle"] = -1
    (img / "0" / ".zarray").write_text(json.dumps(meta))
    assert pyramid(cli, img, "min_size=64")[0] == 0
    assert json.loads((img / "1" / ".zarray").read_text())["compressor"]["shuffle"] == 2
