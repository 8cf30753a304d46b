"""Each new instrument format against an independent parser of it, on what ``generate-plate``
writes (every metadata field the instrument writes):

- Fractal's converters (fractal-uzh-converters, in .venv-peers) for CQ3000, HCS.ai, Operetta and
  scanR: the same wells, FOVs at the same places, the same pixel size, z step and channel count,
  and well images equal to zarrmill's ``layout: well`` pixel for pixel;
- faim-ipa (in .venv-faim) for MetaXpress folders as acquired: the same wells, tiles at the same
  pixel positions, the same pixel size, z step and channels (tests/peers/faim_metaxpress.py)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import IN_CI
from test_peers import attrs, run

from zarrmill.io.ngff.fov_table import read_roi_table

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("ZARRMILL_PEERS_PYTHON", REPO / ".venv-peers" / "bin" / "python"))
FAIM = Path(os.environ.get("ZARRMILL_FAIM_PYTHON", REPO / ".venv-faim" / "bin" / "python"))
WELLS = ("B03", "C05", "D11")


def venv(python: Path, what: str) -> Path:
    if not python.exists():
        if IN_CI:
            pytest.fail(f"{python} missing: tests/run installs {what}")
        pytest.skip(f"no {what} venv at {python} (bash tests/run makes it)")
    return python


def generate(cli, raw: Path, fmt: str, z_planes: int) -> None:
    run(cli, "generate-plate", f"output={raw}", f"format={fmt}", f"wells=[{','.join(WELLS)}]", "grid=[2,3]",
        "shape=[48,64]", f"z_planes={z_planes}", "z_step=1.5", "pixel_size=0.4", "channels=3")


@pytest.mark.parametrize("fmt,z_planes", [("cq", 3), ("operetta", 3), ("scanr", 3), ("hcsai", 3), ("operetta", 1)])
def test_fractals_converter_reads_each_format_as_zarrmill_does(cli, tmp_path, fmt, z_planes):
    python = venv(PEERS, "Fractal's converters (tests/peers/requirements.txt)")
    raw = tmp_path / "raw"
    generate(cli, raw, fmt, z_planes)
    extra = ["96-well"] if fmt == "scanr" else []
    done = subprocess.run([str(python), str(REPO / "tests" / "peers" / "fractal_convert.py"), fmt, str(raw),
                           str(tmp_path / "fractal"), *extra], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    plates = json.loads(done.stdout.strip().splitlines()[-1])["plates"]
    assert len(plates) == 1
    theirs, ours = Path(plates[0]), tmp_path / "ours.zarr"
    run(cli, "ingest", f"input={raw}", f"output={ours}", "layout=well", "min_size=16",
        *(["plate_shape=[8,12]"] if fmt == "hcsai" else []))
    plate_t, plate_o = attrs(theirs)["plate"], attrs(ours)["plate"]
    assert [w["path"] for w in plate_t["wells"]] == [w["path"] for w in plate_o["wells"]] == ["B/03", "C/05", "D/11"]
    for well in ("B/03", "C/05", "D/11"):
        image_t = theirs / well / attrs(theirs / well)["well"]["images"][0]["path"]
        image_o = ours / well / "well"
        ms_t, ms_o = attrs(image_t)["multiscales"][0], attrs(image_o)["multiscales"][0]
        scale_t = ms_t["datasets"][0]["coordinateTransformations"][0]["scale"]
        scale_o = ms_o["datasets"][0]["coordinateTransformations"][0]["scale"]
        assert [round(s, 6) for s in scale_t[-2:]] == scale_o[-2:] == [0.4, 0.4]
        if z_planes > 1:
            assert round(scale_t[-3], 6) == scale_o[-3] == 1.5
        assert len(attrs(image_t)["omero"]["channels"]) == len(attrs(image_o)["omero"]["channels"]) == 3
        rows_t, rows_o = read_roi_table(image_t, "FOV_ROI_table"), read_roi_table(image_o, "FOV_ROI_table")
        assert len(rows_t) == len(rows_o) == 6
        for axis in ("x", "y"):
            origin = min(r[f"{axis}_micrometer_original"] for r in rows_t)
            assert sorted(round(r[f"{axis}_micrometer_original"] - origin, 3) for r in rows_t) == \
                   sorted(round(r[f"{axis}_micrometer_original"], 3) for r in rows_o)
        level0_t = np.asarray(zarr.open_array(str(image_t / ms_t["datasets"][0]["path"]), mode="r")[:])
        level0_o = np.asarray(zarr.open_array(str(image_o / "0"), mode="r")[:])
        assert level0_t.shape == level0_o.shape == (3, z_planes, 96, 192)
        np.testing.assert_array_equal(level0_t, level0_o)


@pytest.mark.parametrize("kind,z_planes,projections", [("single", 1, False), ("stack", 3, False), ("mixed", 3, True)])
def test_faim_ipa_reads_metaxpress_as_acquired_as_zarrmill_does(cli, tmp_path, kind, z_planes, projections):
    from zarrmill.io.readers.registry import ReadOptions, detect, reader

    python = venv(FAIM, "faim-ipa (tests/peers/faim-requirements.txt)")
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "format=metaxpress", f"wells=[{','.join(WELLS)}]", "grid=[2,2]",
        "shape=[40,56]", f"z_planes={z_planes}", "z_step=1.5", "pixel_size=0.5", "channels=3",
        f"projections={str(projections).lower()}")
    acquisition = raw / "synthetic-plate" / "2024-05-01" / "1234"
    done = subprocess.run([str(python), str(REPO / "tests" / "peers" / "faim_metaxpress.py"), str(acquisition), kind],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert detect(raw) == "metaxpress"
    acq = reader("metaxpress").read(raw, ReadOptions(plate_shape=(8, 12)))
    assert theirs["wells"] == [acq.row_label(r) + acq.col_label(c) for r, c in acq.wells()] == list(WELLS)
    assert theirs["yx_spacing"] == list(acq.pixel_size_yx) == [0.5, 0.5]
    if z_planes > 1:
        assert theirs["z_spacing"] == acq.z_step == 1.5
    assert theirs["channels"] == [ch.label for ch in acq.channels] == ["DAPI", "GFP", "RFP"]
    for well, tiles in theirs["tiles"].items():
        planes = [p for p in acq.planes if acq.row_label(p.row) + acq.col_label(p.col) == well]
        y0, x0 = min(p.y_um for p in planes), min(p.x_um for p in planes)
        ours = sorted([p.c, p.z, round((p.y_um - y0) / 0.5), round((p.x_um - x0) / 0.5), Path(p.path).name]
                      for p in planes)
        ty0, tx0 = min(t[2] for t in tiles), min(t[3] for t in tiles)
        cs, zs = sorted({t[0] for t in tiles}), sorted({t[1] for t in tiles})
        assert sorted([cs.index(t[0]), zs.index(t[1]), t[2] - ty0, t[3] - tx0, t[4]] for t in tiles) == ours
