"""The default codec follows the job's shape (#39): plates and series zstd 1 + byte shuffle (fewer
bytes than the leanest peer), a single volume LZ4 5 + bitshuffle (speed); ``codec`` set wins."""
import json
from pathlib import Path

import numpy as np
import tifffile


def blosc_of(array: Path) -> dict:
    meta = json.loads((array / "zarr.json").read_text())
    codecs = meta["codecs"]
    inner = codecs[0]["configuration"]["codecs"] if codecs[0]["name"] == "sharding_indexed" else codecs
    return next(c["configuration"] for c in inner if c["name"] == "blosc")


def run(cli, *sets: str) -> None:
    args = ["task", "ingest", "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 0, err


def test_plates_default_to_zstd_and_volumes_to_lz4_unless_set(cli, tmp_path):
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={tmp_path / 'raw'}",
                       "--set", "wells=[B03]", "--set", "grid=[1,2]", "--set", "shape=[32,48]", "--set", "z_planes=2")
    assert code == 0, err
    tifffile.imwrite(tmp_path / "v.tif", np.arange(4 * 32 * 48, dtype=np.uint16).reshape(4, 32, 48),
                     imagej=True, metadata={"axes": "ZYX"})
    run(cli, f"input={tmp_path / 'raw'}", f"output={tmp_path / 'fov.zarr'}")
    run(cli, f"input={tmp_path / 'raw'}", f"output={tmp_path / 'well.zarr'}", "layout=well")
    run(cli, f"input={tmp_path / 'v.tif'}", f"output={tmp_path / 'v.zarr'}")
    run(cli, f"input={tmp_path / 'v.tif'}", f"output={tmp_path / 'set.zarr'}", "codec.cname=zstd", "codec.clevel=3")
    plate = {"cname": "zstd", "clevel": 1, "shuffle": "shuffle"}
    for array in (tmp_path / "fov.zarr" / "B" / "03" / "0" / "0", tmp_path / "well.zarr" / "B" / "03" / "well" / "0"):
        assert {k: blosc_of(array)[k] for k in plate} == plate, array
    assert {k: blosc_of(tmp_path / "v.zarr" / "0")[k] for k in plate} == {"cname": "lz4", "clevel": 5,
                                                                         "shuffle": "bitshuffle"}
    assert blosc_of(tmp_path / "set.zarr" / "0")["cname"] == "zstd" and blosc_of(tmp_path / "set.zarr" / "0")["clevel"] == 3
