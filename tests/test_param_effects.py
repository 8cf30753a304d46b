"""Parameters that no other test passed, each with an assertion on its effect (#29 item 3), and the
test that fails when a task parameter is named by no test at all."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import run_task

from zarrmill.io.ngff.metadata import Level, make_axes, write_image_metadata
from zarrmill.runtime.execution.registry import get_task, task_names

TESTS = Path(__file__).resolve().parent


def named_in_tests(field: str, text: str) -> bool:
    """A parameter counts as named where a test sets it: ``"name=`` (--set, f-strings) or a
    ``"name":`` key (workflow params)."""
    return any(form in text for form in (f'"{field}=', f"'{field}=", f'"{field}":', f"'{field}':"))


def test_every_task_parameter_is_named_by_some_test():
    text = "\n".join(p.read_text() for p in TESTS.rglob("*.py") if "bench" not in p.parts)
    unnamed = [f"{name}.{field}" for name in task_names() for field in get_task(name).params_model.model_fields
               if not named_in_tests(field, text)]
    assert unnamed == [], f"task parameters no test sets: {unnamed}"


def test_the_coverage_rule_sees_a_missing_name():  # the test above cannot pass vacuously
    assert named_in_tests("levels", 'cli("--set", "levels=3")')
    assert named_in_tests("levels", "params = {'levels': 3}")
    assert not named_in_tests("levels", "def levels(x): return x  # levels: 3")


# -- pyramid --------------------------------------------------------------------------------------
def labels_image(root: Path, shape=(1, 16, 16)) -> Path:
    """Labels whose 2x2 blocks hold three pixels of one label and, at the block's first pixel,
    another: ``mode`` and ``nearest`` downsampling differ on every block."""
    arr = np.zeros(shape, np.uint16)
    for by in range(0, shape[1], 2):
        for bx in range(0, shape[2], 2):
            arr[:, by:by + 2, bx:bx + 2] = 1 + (by // 2 + bx // 2) % 3  # the majority
            arr[:, by, bx] = 7                                         # the minority, top-left
    z = zarr.create_array(str(root / "0"), shape=shape, chunks=shape, dtype="uint16")
    z[...] = arr
    write_image_metadata(root, "0.5", make_axes("zyx"), [Level("0", [1.0, 0.5, 0.5], [0.0, 10.0, 20.0])])
    return root


def level(root: Path, k: int) -> np.ndarray:
    return np.asarray(zarr.open_array(str(root / str(k)))[...])


def transforms(root: Path) -> list[dict]:
    ms = json.loads((root / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    return [{ct["type"]: ct[ct["type"]] for ct in ds["coordinateTransformations"]} for ds in ms["datasets"]]


@pytest.mark.parametrize("method", ["mode", "nearest"])
def test_pyramid_method_mode_takes_the_majority_and_nearest_the_first_pixel(cli, tmp_path, method):
    img = labels_image(tmp_path / "labels.zarr")
    code, err = run_task(cli, "pyramid", f"input={img}", f"method={method}", "levels=2", "min_size=2")
    assert code == 0, err
    base, low = level(img, 0), level(img, 1)
    if method == "nearest":
        np.testing.assert_array_equal(low, base[:, ::2, ::2])
        assert (low == 7).all()
        assert transforms(img)[1]["translation"] == [0.0, 10.0, 20.0]  # first pixel: no shift
    else:
        expected = 1 + (np.arange(8)[:, None] + np.arange(8)[None, :]) % 3
        np.testing.assert_array_equal(low[0], expected)
        assert transforms(img)[1]["translation"] == [0.0, 10.25, 20.25]  # block centre: (f - 1) / 2 x 0.5


def test_pyramid_factor_levels_and_z_factor(cli, tmp_path):
    img = tmp_path / "img.zarr"
    code, err = run_task(cli, "generate", f"output={img}", "shape=[8,81,81]", "n_blobs=5", "pixel_size=[0.5,0.5,0.5]")
    assert code == 0, err
    code, err = run_task(cli, "pyramid", f"input={img}", "factor=3", "levels=3", "z_factor=2", "min_size=1")
    assert code == 0, err
    shapes = [zarr.open_array(str(img / str(k))).shape for k in range(3)]
    assert shapes == [(8, 81, 81), (4, 27, 27), (2, 9, 9)]
    assert not (img / "3").exists()  # levels counts level 0
    assert [t["scale"] for t in transforms(img)] == [[0.5, 0.5, 0.5], [1.0, 1.5, 1.5], [2.0, 4.5, 4.5]]
    low = level(img, 1).astype(np.float64)
    ref = level(img, 0).astype(np.float64).reshape(4, 2, 27, 3, 27, 3).mean(axis=(1, 3, 5))
    np.testing.assert_array_equal(low, np.rint(ref))


def test_pyramid_target_chunk_mb_grows_chunks_and_codec_is_written(cli, tmp_path):
    img = tmp_path / "img.zarr"
    assert run_task(cli, "generate", f"output={img}", "shape=[512,512]", "axes=yx", "chunks=[64,64]",
                    "n_blobs=5")[0] == 0
    code, err = run_task(cli, "pyramid", f"input={img}", "target_chunk_mb=0.03", "min_size=64", "shard_mb=null",
                         'codec={"cname": "lz4", "clevel": 3, "shuffle": "noshuffle"}')
    assert code == 0, err
    meta = json.loads((img / "1" / "zarr.json").read_text())
    chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
    assert 64 * 64 < chunks[0] * chunks[1] * 2 <= 0.03 * 2**20 * 1.01, chunks  # grown toward 30 KB
    blosc = next(c for c in meta["codecs"] if c["name"] == "blosc")["configuration"]
    assert (blosc["cname"], blosc["clevel"], blosc["shuffle"]) == ("lz4", 3, "noshuffle")


# -- ingest ---------------------------------------------------------------------------------------
def cellvoyager(cli, root: Path, *sets: str) -> Path:
    args = [f"output={root}", "wells=[B03]", "grid=[1,3]", "shape=[32,48]", "channels=1", *sets]
    assert run_task(cli, "generate-plate", *args)[0] == 0
    return root


def test_ingest_mlf_and_mrf_name_renamed_metadata_files(cli, tmp_path):
    raw = cellvoyager(cli, tmp_path / "raw", "blobs_per_field=3")
    (raw / "MeasurementData.mlf").rename(raw / "run7.mlf")
    (raw / "MeasurementDetail.mrf").rename(raw / "run7.mrf")
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'p.zarr'}", "format=cellvoyager")
    assert code == 2 and "MeasurementData.mlf" in err
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'p.zarr'}", "format=cellvoyager",
                         "mlf=run7.mlf", "mrf=run7.mrf")
    assert code == 0, err
    assert len(list((tmp_path / "p.zarr" / "B" / "03").iterdir())) >= 3  # three fields (+ zarr.json)


def test_ingest_allow_extra_files_accepts_images_the_mlf_does_not_list(cli, tmp_path):
    raw = cellvoyager(cli, tmp_path / "raw")
    first = sorted(raw.glob("*.tif"))[0]
    shutil.copy(first, raw / first.name.replace("F001", "F009"))
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'a.zarr'}")
    assert code == 2 and "allow_extra_files" in err
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'a.zarr'}", "allow_extra_files=true")
    assert code == 0, err
    fields = [p.name for p in (tmp_path / "a.zarr" / "B" / "03").iterdir() if p.is_dir()]
    assert len(fields) == 3  # the unlisted image is ignored, not ingested


def test_ingest_chunk_yx_sets_the_chunk_tile(cli, tmp_path):
    raw = cellvoyager(cli, tmp_path / "raw")
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'p.zarr'}", "chunk_yx=[16,24]")
    assert code == 0, err
    arr = zarr.open_array(str(tmp_path / "p.zarr" / "B" / "03" / "0" / "0"))
    inner = arr.chunks
    assert tuple(inner[-2:]) == (16, 24)


@pytest.mark.parametrize("task", ["ingest", "reshard"])
def test_image_name_names_the_well_image(cli, tmp_path, task):
    raw = cellvoyager(cli, tmp_path / "raw")
    if task == "ingest":
        code, err = run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'w.zarr'}", "layout=well",
                             "image_name=fused", "min_size=8")
    else:
        assert run_task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'p.zarr'}")[0] == 0
        code, err = run_task(cli, "reshard", f"input={tmp_path / 'p.zarr'}", f"output={tmp_path / 'w.zarr'}",
                             "image_name=fused", "min_size=8", "chunk_yx=[16,16]")
    assert code == 0, err
    well = json.loads((tmp_path / "w.zarr" / "B" / "03" / "zarr.json").read_text())["attributes"]["ome"]["well"]
    assert [im["path"] for im in well["images"]] == ["fused"]
    assert (tmp_path / "w.zarr" / "B" / "03" / "fused" / "tables" / "FOV_ROI_table").is_dir()
    if task == "reshard":
        assert tuple(zarr.open_array(str(tmp_path / "w.zarr" / "B" / "03" / "fused" / "0")).chunks[-2:]) == (16, 16)


def test_ingest_pattern_grid_columns_and_plate_shape(cli, tmp_path):
    src = tmp_path / "files"
    src.mkdir()
    import tifffile

    for field in range(1, 5):
        tifffile.imwrite(src / f"P_AB02_s{field}_w1.tif", np.full((8, 10), field, np.uint16))
    code, err = run_task(cli, "ingest", f"input={src}", f"output={tmp_path / 'p.zarr'}",
                         "pattern={plate}_{well}_s{field}_w{channel}.tif", "grid_columns=4", "plate_shape=[32,48]",
                         "layout=well", "min_size=4")
    assert code == 0, err
    plate = json.loads((tmp_path / "p.zarr" / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    assert len(plate["rows"]) == 32 and len(plate["columns"]) == 48  # plate_shape: a 1536-well plate
    well = np.asarray(zarr.open_array(str(tmp_path / "p.zarr" / "AB" / "02" / "well" / "0"))[...])
    assert well.shape[-2:] == (8, 40)  # grid_columns=4: four fields side by side in one row
    np.testing.assert_array_equal(well.reshape(-1, 8, 40)[0][0, ::10], [1, 2, 3, 4])


# -- the rest: cluster-check, compress, generate-plate, patch-extract, tune -------------------------
@pytest.mark.parametrize("record", [True, False])
def test_cluster_check_record_writes_one_file_per_unit_or_none(cli, tmp_path, record):
    assert run_task(cli, "cluster-check", f"output={tmp_path / 'cc'}", "units=3", f"record={str(record).lower()}")[0] == 0
    assert len(list((tmp_path / "cc" / "units").glob("*.json"))) == (3 if record else 0)


def cases(root: Path) -> Path:
    root.mkdir()
    rng = np.random.default_rng(4)
    for i in range(2):
        np.save(root / f"c{i}.npy", rng.integers(0, 50, (1, 16, 32, 32)).astype(np.uint16))
    return root


def test_compress_blocks_filter_and_trial_chunks(cli, tmp_path):
    import blosc2

    src = cases(tmp_path / "cases")
    code, err = run_task(cli, "compress", f"input={src}", f"output={tmp_path / 'a'}", "patch=[8,16,16]",
                         "codec=lz4", "filter=bitshuffle", "chunks=[1,8,16,16]", "blocks=[1,4,8,8]")
    assert code == 0, err
    arr = blosc2.open(str(tmp_path / "a" / "c0.b2nd"))
    assert tuple(arr.blocks) == (1, 4, 8, 8) and tuple(arr.chunks) == (1, 8, 16, 16)
    assert blosc2.Filter.BITSHUFFLE in arr.schunk.cparams.filters
    code, err = run_task(cli, "compress", f"input={src}", f"output={tmp_path / 'b'}", "patch=[8,16,16]",
                         "trial_chunks=6")
    assert code == 0, err
    summary = json.loads((tmp_path / "b" / "zarrmill" / "compress.json").read_text())
    assert summary["codec"]["trial_samples"] == 6  # 3 chunks from each of the 2 cases


def test_generate_plate_blobs_per_field(cli, tmp_path):
    import tifffile

    spread = {}
    for n in (0, 40):
        raw = cellvoyager(cli, tmp_path / f"raw{n}", f"blobs_per_field={n}")
        spread[n] = float(np.std(tifffile.imread(sorted(raw.glob("*.tif"))[0])))
    assert spread[40] > 3 * spread[0]  # cells make the image vary; background alone barely does


def test_patch_extract_voxel_size_patches_per_chunk_and_cache_mb(cli, tmp_path):
    img = tmp_path / "img.zarr"
    assert run_task(cli, "generate", f"output={img}", "shape=[16,48,48]", "n_blobs=5",
                    "pixel_size=[5.0,2.0,2.0]")[0] == 0
    (tmp_path / "pts.csv").write_text("z,y,x\n8,24,24\n6,20,30\n")
    common = [f"input={img}", f"points={tmp_path / 'pts.csv'}", "cuboid=[4,6,6]", "network_voxel_size=[5,1,1]"]
    sizes = {}
    for name, extra in (("scale", []), ("override", ["voxel_size=[5,1,1]"])):
        assert run_task(cli, "patch-extract", *common, f"output={tmp_path / name}.zarr", *extra)[0] == 0
        arr = zarr.open_array(str(tmp_path / f"{name}.zarr" / "table" / "size"))
        sizes[name] = arr[0].tolist()
    assert sizes == {"scale": [4, 3, 3], "override": [4, 6, 6]}  # data voxels cut = network size x ratio
    a, b = tmp_path / "small.zarr", tmp_path / "big.zarr"
    assert run_task(cli, "patch-extract", *common, f"output={a}", "patches_per_chunk=1", "patches_per_shard=2",
                    "cache_mb=0.001")[0] == 0
    assert run_task(cli, "patch-extract", *common, f"output={b}")[0] == 0
    assert zarr.open_array(str(a / "patches")).chunks[0] == 1
    np.testing.assert_array_equal(zarr.open_array(str(a / "patches"))[...], zarr.open_array(str(b / "patches"))[...])


def test_tune_sample_cases_and_crop_set_the_sample(cli, tmp_path):
    src = cases(tmp_path / "cases")
    code, _, err = cli("task", "tune", "--executor", "sync", "--set", f"input={src}", "--set",
                       f"output={tmp_path / 't'}", "--set", "patch=[4,8,8]", "--set", "seconds=1", "--set",
                       "layouts=[zarrmill]", "--set", "sample_cases=1", "--set", "crop=2")
    assert code == 0, err
    import csv

    rows = list(csv.DictReader(open(tmp_path / "t" / "tune.csv")))
    # one case, cropped to 2 patches a side: 1 x 8 x 16 x 16 uint16
    assert {float(r["sample_mb"]) for r in rows} == {1 * 8 * 16 * 16 * 2 / 1e6}
