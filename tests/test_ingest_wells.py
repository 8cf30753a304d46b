"""ingest layout: well writes, in one pass, the plate that ingest + reshard write in two: same arrays
(every level, the overview), same NGFF metadata, same ROI tables."""
import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store
from zarrmill.io.ngff.fov_table import read_roi_table


def run(cli, task, *sets, executor="sync"):
    args = ["task", task, "--executor", executor]
    for s in sets:
        args += ["--set", s]
    code, out, err = cli(*args)
    assert code == 0, err
    return out


def metadata_files(root: Path) -> dict[str, dict]:
    """Every zarr metadata document under root, by relative path (zarrmill's bookkeeping aside)."""
    out = {}
    for f in sorted(root.rglob("*")):
        if f.name in ("zarr.json", ".zattrs", ".zarray", ".zgroup") and ".zarrmill" not in f.parts:
            out[str(f.relative_to(root))] = json.loads(f.read_text())
    return out


def comparable(doc: dict) -> dict:
    """A metadata document without zarrmill's provenance (it names the source: raw folder or plate)."""
    doc = json.loads(json.dumps(doc))
    doc.get("attributes", doc).pop("zarrmill", None)
    return doc


def assert_same_plate(a: Path, b: Path) -> None:
    docs_a, docs_b = metadata_files(a), metadata_files(b)
    assert sorted(docs_a) == sorted(docs_b)
    for rel in docs_a:
        if "/tables/" in f"/{rel}":
            continue  # tables are compared by value below (their attributes name the source folder)
        assert comparable(docs_a[rel]) == comparable(docs_b[rel]), rel
    arrays = [Path(rel).parent for rel, doc in docs_a.items()
              if doc.get("node_type") == "array" or rel.endswith(".zarray")]
    assert arrays
    for rel in arrays:
        if "tables" in rel.parts:
            continue
        np.testing.assert_array_equal(zarr.open_array(str(a / rel), mode="r")[:],
                                      zarr.open_array(str(b / rel), mode="r")[:], err_msg=str(rel))
    images = sorted({Path(rel).parent for rel in docs_a if Path(rel).parent.name == "well"})
    assert images, "no well images"
    for image in images:
        for table in ("FOV_ROI_table", "well_ROI_table"):
            assert read_roi_table(a / image, table) == read_roi_table(b / image, table), f"{image} {table}"


@pytest.mark.parametrize("version,overlap,volume_mb", [("0.5", "first", 192), ("0.4", "shift", 192),
                                                       ("0.5", "mean", 0), ("0.5", "last", 0.15)])
def test_layout_well_equals_ingest_then_reshard(cli, tmp_path, version, overlap, volume_mb):
    """volume_mb 0: wells in unit_mb regions, lower levels read back from level 0 (the way for wells
    too large to hold a channel's volume); 0.15: one unit per channel volume (a well is ~0.18 MB);
    192: one unit per well; both build the pyramid from memory."""
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03,C05]", "grid=[2,2]", "shape=[64,96]", "z_planes=2",
        "overlap=0.1", "jitter_um=1.0")
    fov_plate = tmp_path / "p.zarr"
    run(cli, "ingest", f"input={raw}", f"output={fov_plate}", f"ngff_version={version}")
    two_pass = tmp_path / "two.zarr"
    run(cli, "reshard", f"input={fov_plate}", f"output={two_pass}", f"overlap={overlap}", "overview=true",
        "overview_size=64", "min_size=32", f"volume_mb={volume_mb}")
    one_pass = tmp_path / "one.zarr"
    before = {f: f.read_bytes() for f in raw.rglob("*") if f.is_file()}
    run(cli, "ingest", f"input={raw}", f"output={one_pass}", "layout=well", f"ngff_version={version}",
        f"overlap={overlap}", "overview=true", "overview_size=64", "min_size=32", f"volume_mb={volume_mb}",
        executor="local")
    assert {f: f.read_bytes() for f in raw.rglob("*") if f.is_file()} == before, "the raw folder is only read"
    assert_same_plate(two_pass, one_pass)
    validate_store(one_pass)
    assert check_store(one_pass)[0] == []
    attrs = zarr.open_group(str(one_pass / "B" / "03" / "well"), mode="r").attrs.asdict()["zarrmill"]
    assert [f["fov"] for f in attrs["fields"]] == ["FOV_1", "FOV_2", "FOV_3", "FOV_4"]
    assert all(f["instrument_well"] == "B03" for f in attrs["fields"])


def test_layout_well_from_a_pattern_series_with_time_and_a_missing_plane(cli, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = np.random.default_rng(0)
    planes = {}
    for well, x0 in (("A01", 0.0), ("A02", 0.0)):
        for field, x in ((1, x0), (2, x0 + 10.0)):
            for t in (1, 2):
                for c in (1, 2):
                    if (well, field, t, c) == ("A02", 2, 2, 1):
                        continue  # the missing plane
                    a = rng.integers(0, 4000, (20, 40), dtype=np.uint16)
                    planes[(well, field, t, c)] = a
                    tifffile.imwrite(raw / f"{well}_s{field}_t{t}_w{c}.tif", a)
    (raw / "pos.csv").write_text("well,field,x,y\nA01,1,0,0\nA01,2,10,0\nA02,1,0,0\nA02,2,10,0\n")
    sets = [f"input={raw}", "pattern={well}_s{field}_t{t}_w{channel}.tif", f"positions={raw / 'pos.csv'}",
            "pixel_size=[0.5,0.25]", "missing=zeros", "min_size=8"]
    run(cli, "ingest", *sets[:-1], f"output={tmp_path / 'p.zarr'}")
    run(cli, "reshard", f"input={tmp_path / 'p.zarr'}", f"output={tmp_path / 'two.zarr'}", "min_size=8")
    run(cli, "ingest", *sets, f"output={tmp_path / 'one.zarr'}", "layout=well")
    assert_same_plate(tmp_path / "two.zarr", tmp_path / "one.zarr")
    well = zarr.open_array(str(tmp_path / "one.zarr" / "A" / "02" / "well" / "0"))[:]
    assert well.shape == (2, 2, 1, 20, 80)  # t c z y x: FOV 2 sits 10 um = 40 px to the right
    np.testing.assert_array_equal(well[1, 1, 0, :, :40], planes[("A02", 1, 2, 2)])
    assert not well[1, 0, 0, :, 40:].any(), "the missing plane is zeros"
    fields = zarr.open_group(str(tmp_path / "one.zarr" / "A" / "02" / "well")).attrs["zarrmill"]["fields"]
    assert fields[1]["missing_planes"] and fields[0]["missing_planes"] == []


def test_layout_well_refuses_a_single_image(cli, tmp_path):
    np.save(tmp_path / "v.npy", np.zeros((4, 8, 8), np.uint8))
    code, out, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'v.npy'}",
                         "--set", f"output={tmp_path / 'o.zarr'}", "--set", "layout=well")
    assert code == 2 and "layout 'well' is for plates" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.zarr").exists()


def test_a_channels_volume_in_memory_gives_the_pyramid_that_reading_back_gives(cli, tmp_path):
    """The two ways of building a well's lower levels give the same pixels (shards differ: in memory,
    no shard spans two channels)."""
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[2,3]", "shape=[50,70]", "z_planes=3",
        "z_step=0.2", "overlap=0.1", "jitter_um=2.0")
    for volume_mb in (0, 0.2, 192):  # read back; one unit per channel volume (~0.13 MB); one per well
        run(cli, "ingest", f"input={raw}", f"output={tmp_path / f'{volume_mb}.zarr'}", "layout=well",
            "min_size=8", f"volume_mb={volume_mb}")
    a = tmp_path / "0.zarr" / "B" / "03" / "well"
    levels = sorted(p.name for p in a.iterdir() if p.name.isdigit())
    assert len(levels) >= 4
    for other in ("0.2", "192"):
        b = tmp_path / f"{other}.zarr" / "B" / "03" / "well"
        assert levels == sorted(p.name for p in b.iterdir() if p.name.isdigit())
        for level in levels:
            np.testing.assert_array_equal(zarr.open_array(str(a / level))[:], zarr.open_array(str(b / level))[:])
        assert metadata_files(a)["zarr.json"] == metadata_files(b)["zarr.json"]
    # one unit per channel: no level-1 shard spans both channels
    shard = json.loads((tmp_path / "0.2.zarr" / "B" / "03" / "well" / "1" / "zarr.json").read_text())
    assert shard["chunk_grid"]["configuration"]["chunk_shape"][0] == 1
