"""patch-extract on real stores: every cuboid against a brute-force reference, edges, resampling,
random and grid modes, bad input."""
import itertools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import write_workflow

from zarrmill.io.training.patch_dataset import PatchDataset
from zarrmill.io.readers.points import write_cellfinder_xml

SHAPE = (23, 41, 37)  # z, y, x: odd on purpose


def make_image(tmp_path: Path, cli, voxel=(5.0, 2.0, 2.0), chunks=(4, 16, 16), channels=1) -> Path:
    shape = ((channels,) if channels > 1 else ()) + SHAPE
    axes = ("c" if channels > 1 else "") + "zyx"
    params = {"output": str(tmp_path / "img.zarr"), "shape": list(shape), "axes": axes, "dtype": "uint16",
              "chunks": list(((1,) if channels > 1 else ()) + chunks), "n_blobs": 30, "pixel_size": list(voxel)}
    wf = write_workflow(tmp_path / "gen.yaml", {"gen": {"task": "generate", "params": params}})
    assert cli("run", wf)[0] == 0
    return tmp_path / "img.zarr"


def extract(cli, tmp_path, image, *sets, executor="sync"):
    args = ["task", "patch-extract", "--executor", executor, "--set", f"input={image}",
            "--set", f"output={tmp_path / 'patches.zarr'}"]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def table(store: Path) -> list[dict]:
    from zarrmill.io.training.patch_table import points_table

    return points_table(store)


def reference_cut(vol: np.ndarray, o, size, mode="constant", value=0) -> np.ndarray:
    """Brute force: pad the whole volume generously, then slice."""
    pad = max(size) + 5
    padded = np.pad(vol, [(0, 0)] * (vol.ndim - 3) + [(pad, pad)] * 3,
                    mode="reflect" if mode == "reflect" else "constant",
                    **({} if mode == "reflect" else {"constant_values": value}))
    sl = tuple(slice(a + pad, a + pad + n) for a, n in zip(o, size))
    return padded[(slice(None),) * (vol.ndim - 3) + sl]


def reference_resample(x: np.ndarray, out) -> np.ndarray:
    """Pointwise trilinear with the documented voxel-centre mapping."""
    n = x.shape
    res = np.zeros(out)
    for idx in itertools.product(*[range(m) for m in out]):
        pos = [min(max((i + 0.5) * a / m - 0.5, 0), a - 1) for i, a, m in zip(idx, n, out)]
        lo = [int(math.floor(q)) for q in pos]
        w = [q - l for q, l in zip(pos, lo)]
        val = 0.0
        for corner in itertools.product((0, 1), repeat=3):
            c = [min(l + d, a - 1) for l, d, a in zip(lo, corner, n)]
            weight = np.prod([wi if d else 1 - wi for wi, d in zip(w, corner)])
            val += weight * x[tuple(c)]
        res[idx] = val
    return res


def edge_points() -> np.ndarray:
    """Points near every face and corner, plus interior ones."""
    z, y, x = (s - 1 for s in SHAPE)
    pts = [(a, b, c) for a in (0, 1, z // 2, z - 1, z) for b in (0, 2, y // 2, y - 1) for c in (0, 3, x // 2, x)]
    return np.asarray(pts, dtype=float)


@pytest.mark.parametrize("edge,pad_mode", [("drop", "constant"), ("pad", "constant"), ("pad", "reflect")])
def test_every_cuboid_equals_brute_force(cli, tmp_path, edge, pad_mode):
    image = make_image(tmp_path, cli)
    vol = np.asarray(zarr.open_array(str(image / "0"))[:])
    pts = edge_points()
    np.save(tmp_path / "pts.npy", pts)
    size = (6, 10, 9)
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'pts.npy'}", f"cuboid={list(size)}",
                           f"edge={edge}", f"pad_mode={pad_mode}", "pad_value=7", "patches_per_shard=8",
                           "patches_per_unit=16")
    assert code == 0, err
    store = tmp_path / "patches.zarr"
    rows = table(store)
    patches = zarr.open_array(str(store / "patches"))
    assert len(rows) == len(pts)
    kept = fitting = 0
    for i, row in enumerate(rows):
        c = pts[int(row["point_id"])]
        o = (int(c[0] - size[0] // 2), int(round(c[1] - size[1] / 2)), int(round(c[2] - size[2] / 2)))
        assert (int(row["origin_z"]), int(row["origin_y"]), int(row["origin_x"])) == o
        fits = all(0 <= a and a + n <= s for a, n, s in zip(o, size, SHAPE))
        fitting += fits
        if edge == "drop" and not fits:
            assert row["status"].startswith("dropped: cuboid crosses")
            continue
        assert row["status"] == "kept"
        kept += 1
        np.testing.assert_array_equal(patches[i, 0], reference_cut(vol, o, size, pad_mode, 7))
    assert 1 <= fitting < len(pts)  # the point set really probes faces and corners
    assert kept == (fitting if edge == "drop" else len(pts))
    assert len(PatchDataset(store)) == kept


def test_resampling_to_network_voxels_with_anisotropic_data(cli, tmp_path):
    image = make_image(tmp_path, cli, voxel=(5.0, 2.0, 2.0))
    vol = np.asarray(zarr.open_array(str(image / "0"))[:]).astype(np.float64)
    # network: 4 x 6 x 6 voxels of 5 x 1 x 1.5 um -> data cut of 4 x 3 x 4.5->4 voxels (z, y, x)
    pts = np.asarray([[11.0, 20.0, 18.0], [5.0, 8.0, 30.0], [19.0, 30.0, 6.0]])
    header = "z,y,x,label\n" + "\n".join(f"{z},{y},{x},{i % 2 + 1}" for i, (z, y, x) in enumerate(pts * [5, 2, 2]))
    (tmp_path / "pts.csv").write_text(header + "\n")
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'pts.csv'}", "points_unit=physical",
                           "cuboid=[4,6,6]", "network_voxel_size=[5,1,1.5]", "centering=round")
    assert code == 0, err
    store = tmp_path / "patches.zarr"
    rows = table(store)
    patches = zarr.open_array(str(store / "patches"))
    for i, row in enumerate(rows):
        c = pts[int(row["point_id"])]
        size = (4, 3, 4)  # round(4*5/5), round(6*1/2), round(6*1.5/2)=round(4.5)=4
        assert [int(row[f"size_{a}"]) for a in "zyx"] == list(size)
        o = tuple(int(round(v - n / 2)) for v, n in zip(c, size))
        expected = np.clip(np.rint(reference_resample(reference_cut(vol, o, size), (4, 6, 6))), 0, 65535)
        np.testing.assert_array_equal(patches[i, 0], expected.astype(np.uint16))
        assert int(row["label"]) == int(row["point_id"]) % 2 + 1


def test_cellfinder_xml_and_bad_points_are_recorded_not_crashes(cli, tmp_path):
    image = make_image(tmp_path, cli)
    pts = np.asarray([[10, 20, 18], [5, 8, 30], [100, 5, 5], [-3, 5, 5]], float)
    write_cellfinder_xml(tmp_path / "cells.xml", pts, np.asarray([2, 1, 2, 1]))
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'cells.xml'}", "cuboid=[4,8,8]")
    assert code == 0, err
    # the XML groups markers by type, so look rows up by their coordinates
    rows = {tuple(int(float(r[f"center_{a}"])) for a in "zyx"): r for r in table(tmp_path / "patches.zarr")}
    assert rows[(10, 20, 18)]["status"] == rows[(5, 8, 30)]["status"] == "kept"
    assert rows[(100, 5, 5)]["status"] == rows[(-3, 5, 5)]["status"] == "dropped: center outside the image"
    assert rows[(10, 20, 18)]["label"] == 2 and rows[(5, 8, 30)]["label"] == 1
    np.save(tmp_path / "nan.npy", np.asarray([[np.nan, 1, 1], [10, 20, 18]]))
    shutil.rmtree(tmp_path / "patches.zarr")
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'nan.npy'}", "cuboid=[4,8,8]")
    assert code == 0, err
    assert sorted(r["status"] for r in table(tmp_path / "patches.zarr")) == ["dropped: NaN coordinate", "kept"]


def test_malformed_points_and_oversized_cuboid_are_one_line(cli, tmp_path):
    image = make_image(tmp_path, cli)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'bad.csv'}", "cuboid=[4,8,8]")
    assert code == 2 and "missing columns ['z', 'y', 'x']" in err
    (tmp_path / "bad.xml").write_text("<CellCounter_Marker_File><Marker_Data><Marker_Type><Type>1")
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'bad.xml'}", "cuboid=[4,8,8]")
    assert code == 2 and "not valid XML" in err
    code, _, err = extract(cli, tmp_path, image, "mode=random", "cuboid=[40,8,8]")
    assert code == 2 and "cuboid [40, 8, 8] is larger than the image [23, 41, 37]" in err
    assert not (tmp_path / "patches.zarr" / "table").exists()


def test_random_mode_reproducible_and_foreground_fraction(cli, tmp_path):
    image = make_image(tmp_path, cli)
    labels = tmp_path / "labels.zarr"
    lab = np.zeros(SHAPE, np.uint8)
    lab[10:12, 30:33, 5:8] = 1  # a tiny foreground object
    zarr.create_array(str(labels), shape=SHAPE, chunks=(8, 16, 16), dtype="uint8")[...] = lab
    args = ["mode=random", "cuboid=[4,8,8]", "n_patches=60", "seed=3", f"labels={labels}", "foreground_fraction=0.5"]
    assert extract(cli, tmp_path, image, *args)[0] == 0
    first = table(tmp_path / "patches.zarr")
    hits = sum(lab[tuple(slice(int(r[f"origin_{a}"]), int(r[f"origin_{a}"]) + int(r[f"size_{a}"])) for a in "zyx")].any()
               for r in first)
    assert hits >= 30
    (tmp_path / "patches.zarr").rename(tmp_path / "first.zarr")
    assert extract(cli, tmp_path, image, *args)[0] == 0
    assert table(tmp_path / "patches.zarr") == first
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "patches.zarr" / "patches"))[:],
                                  zarr.open_array(str(tmp_path / "first.zarr" / "patches"))[:])


def test_grid_covers_every_voxel_with_the_asked_overlap(cli, tmp_path):
    image = make_image(tmp_path, cli, channels=2)
    vol = np.asarray(zarr.open_array(str(image / "0"))[:])
    assert extract(cli, tmp_path, image, "mode=grid", "tile=[8,16,16]", "overlap=[2,4,4]")[0] == 0
    rows = table(tmp_path / "patches.zarr")
    patches = zarr.open_array(str(tmp_path / "patches.zarr" / "patches"))
    cover = np.zeros(SHAPE, int)
    for i, r in enumerate(rows):
        o = [int(r[f"origin_{a}"]) for a in "zyx"]
        sl = tuple(slice(a, a + n) for a, n in zip(o, (8, 16, 16)))
        cover[sl] += 1
        np.testing.assert_array_equal(patches[i], vol[(slice(None),) + sl])
    assert cover.min() >= 1
    zs = sorted({int(r["origin_z"]) for r in rows})
    assert zs == [0, 6, 12, 15] and all(b - a <= 8 - 2 for a, b in zip(zs, zs[1:]))


def test_patch_dataset_pickles_for_dataloader_workers(cli, tmp_path):
    import multiprocessing as mp
    import pickle

    image = make_image(tmp_path, cli)
    assert extract(cli, tmp_path, image, "mode=grid", "tile=[8,16,16]")[0] == 0
    ds = PatchDataset(tmp_path / "patches.zarr")
    first = ds[0]
    # float32 by default (what torch trains on), contiguous, writable, equal to the stored patch
    assert first.dtype == np.float32 and first.flags.c_contiguous and first.flags.writeable
    raw = PatchDataset(tmp_path / "patches.zarr", dtype=None)[0]
    assert raw.dtype == np.uint16 and np.array_equal(raw.astype(np.float32), first)
    np.testing.assert_array_equal(raw, zarr.open_array(str(tmp_path / "patches.zarr" / "patches"))[0])
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[0], first)
    with mp.get_context("spawn").Pool(2) as pool:
        shapes = pool.map(_shape_of, [(ds, i) for i in range(len(ds))])
    assert set(shapes) == {(1, 8, 16, 16)}


def _shape_of(args):
    ds, i = args
    return ds[i].shape


@pytest.mark.parametrize("executor", ["threads", "local"])
def test_one_worker_and_many_workers_write_identical_stores(cli, tmp_path, executor):
    from conftest import tree_digest

    image = make_image(tmp_path, cli)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "pts.npy", rng.uniform(0, 1, (300, 3)) * np.asarray(SHAPE))
    common = [f"points={tmp_path / 'pts.npy'}", "cuboid=[4,8,8]", "patches_per_shard=16", "patches_per_unit=32"]
    assert extract(cli, tmp_path, image, *common)[0] == 0
    (tmp_path / "patches.zarr").rename(tmp_path / "one.zarr")
    assert extract(cli, tmp_path, image, *common, executor=executor)[0] == 0
    assert tree_digest(tmp_path / "one.zarr") == tree_digest(tmp_path / "patches.zarr")


def test_units_end_where_an_input_chunk_layer_starts():
    from zarrmill.patches import unit_ranges

    layer = np.repeat([0, 1, 2, 3], [1000, 1000, 1000, 1000])
    ranges = unit_ranges(layer, shard=64, per_unit=1536)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(layer)
    assert all(b == c for (_, b), (c, _) in zip(ranges, ranges[1:])), "contiguous, no gaps"
    assert all(a % 64 == 0 for a, _ in ranges), "whole output shards only"
    # every cut is just after the shard holding a layer change (a count-based split of 1536
    # would cut mid-layer at 1536 and 3072)
    for a, _ in ranges[1:]:
        assert len(set(layer[a - 64:a])) == 2, f"cut at {a} is not after a layer change"
    assert [layer[a] for a, _ in ranges] == [0, 1, 2, 3]


def test_dropped_points_are_counted_by_reason_in_one_warning_naming_the_table(cli, tmp_path):
    image = make_image(tmp_path, cli)
    np.save(tmp_path / "pts.npy", np.asarray([[np.nan, 1, 1], [10, 20, 18], [100, 5, 5], [-3, 5, 5], [0, 0, 0]]))
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'pts.npy'}", "cuboid=[4,8,8]")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("zarrmill: warning:")]
    assert warnings == [f"zarrmill: warning: {tmp_path / 'patches.zarr' / 'table'}: 4 of 5 points dropped "
                        "(1 NaN coordinate, 2 center outside the image, 1 cuboid crosses the image edge "
                        "(edge: drop)); their rows say why"], err
    assert sorted(r["status"] for r in table(tmp_path / "patches.zarr")).count("kept") == 1


def test_all_points_dropped_is_an_error_unless_allow_empty(cli, tmp_path):
    image = make_image(tmp_path, cli)
    np.save(tmp_path / "far.npy", np.asarray([[500.0, 5, 5], [np.nan, 1, 1]]))
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'far.npy'}", "cuboid=[4,8,8]")
    assert code == 2 and err.strip().splitlines() == [
        f"zarrmill: error: {tmp_path / 'far.npy'}: all 2 points dropped (1 NaN coordinate, 1 center outside the "
        "image); check points_unit, voxel_size, level and edge, or set allow_empty: true"], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'far.npy'}", "cuboid=[4,8,8]",
                           "allow_empty=true")
    assert code == 0, err
    assert "2 of 2 points dropped" in err
    assert [r["status"] for r in table(tmp_path / "patches.zarr")].count("kept") == 0
    assert cli("check", tmp_path / "patches.zarr")[0] == 0
    from zarrmill.io.training.patch_dataset import PatchDataset

    assert len(PatchDataset(tmp_path / "patches.zarr")) == 0


def test_a_pad_value_the_dtype_cannot_hold_is_refused(cli, tmp_path):
    image = make_image(tmp_path, cli)
    np.save(tmp_path / "pts.npy", np.asarray([[0.0, 0, 0]]))
    code, _, err = extract(cli, tmp_path, image, f"points={tmp_path / 'pts.npy'}", "cuboid=[4,8,8]", "edge=pad",
                           "pad_value=70000")
    assert code == 2 and "pad_value 70000 does not fit the image's uint16 (0..65535)" in err
    assert not (tmp_path / "patches.zarr").exists()


@pytest.mark.parametrize("text", ["z,y,x\n1,2.5,3\n4,5,6\n", "z\ty\tx\n1\t2.5\t3\n4\t5\t6\n", "z;y;x\n1;2.5;3\n4;5;6\n",
                                  "z y x\n1 2.5 3\n4   5 6\n", "# cells\nz, y, x\n1, 2.5, 3\n4, 5, 6\n"])
def test_points_files_in_any_common_delimiter_are_read_right(tmp_path, text):
    from zarrmill.io.readers.points import read_points

    (tmp_path / "p.txt").write_text(text)
    np.testing.assert_array_equal(read_points(tmp_path / "p.txt").zyx, [[1, 2.5, 3], [4, 5, 6]])


@pytest.mark.parametrize("text,where", [("z y x\n1,5 2,5 3,5\n", "p.txt:2:"),  # decimal commas, space separated
                                        ("z,y,x\n1 2 3\n", "p.txt:2: 1 values"),  # a row split another way
                                        ("z;y;x\n1;2;3\n4,5,6\n", "p.txt:3: 1 values")])
def test_points_rows_split_another_way_than_the_header_are_refused_naming_the_line(tmp_path, text, where):
    from zarrmill.errors import InputError
    from zarrmill.io.readers.points import read_points

    (tmp_path / "p.txt").write_text(text)
    with pytest.raises(InputError, match=where):
        read_points(tmp_path / "p.txt")
