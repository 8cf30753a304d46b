"""zarrmill against Fractal's own CellVoyager converter (fractal-uzh-converters, an independent
mlf/mrf parser), run from its own venv (.venv-peers, made by tests/run):

- it accepts what ``generate-plate`` writes (every mrf field a real instrument writes) and finds
  the wells, fields, channels, pixel size and z spacing zarrmill wrote;
- its well images equal zarrmill's ``layout: well`` images pixel for pixel, with FOVs at the same
  places."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import IN_CI

from zarrmill.io.ngff.fov_table import read_roi_table

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("ZARRMILL_PEERS_PYTHON", REPO / ".venv-peers" / "bin" / "python"))


@pytest.fixture(scope="module")
def peers_python() -> Path:
    if not PEERS.exists():
        if IN_CI:
            pytest.fail(f"{PEERS} missing: tests/run installs the peer tools (tests/peers/requirements.txt)")
        pytest.skip(f"no peers venv at {PEERS} (bash tests/run makes it)")
    return PEERS


def run(cli, task, *sets):
    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    code, out, err = cli(*args)
    assert code == 0, err
    return out


def fractal_convert(python: Path, raw: Path, out: Path) -> Path:
    done = subprocess.run([str(python), str(REPO / "tests" / "peers" / "fractal_cellvoyager.py"), str(raw), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    plates = json.loads(done.stdout.strip().splitlines()[-1])["plates"]
    assert len(plates) == 1
    return Path(plates[0])


def attrs(group: Path) -> dict:
    a = zarr.open_group(str(group), mode="r").attrs.asdict()
    return a.get("ome", a)


@pytest.mark.parametrize("z_planes", [1, 3])
def test_fractals_parser_reads_generate_plate_output_as_zarrmill_does(cli, tmp_path, peers_python, z_planes):
    raw = tmp_path / "raw"
    run(cli, "generate-plate", f"output={raw}", "wells=[B03,C05,D11]", "grid=[2,3]", "shape=[48,64]",
        f"z_planes={z_planes}", "z_step=1.5", "pixel_size=0.4", "channels=3")
    theirs = fractal_convert(peers_python, raw, tmp_path / "fractal")
    ours = tmp_path / "ours.zarr"
    run(cli, "ingest", f"input={raw}", f"output={ours}", "layout=well", "min_size=16")

    plate_t, plate_o = attrs(theirs)["plate"], attrs(ours)["plate"]
    assert [w["path"] for w in plate_t["wells"]] == [w["path"] for w in plate_o["wells"]] == ["B/03", "C/05", "D/11"]
    for well in ("B/03", "C/05", "D/11"):
        image_t = theirs / well / attrs(theirs / well)["well"]["images"][0]["path"]
        image_o = ours / well / "well"
        ms_t, ms_o = attrs(image_t)["multiscales"][0], attrs(image_o)["multiscales"][0]
        # pixel size and z spacing, as each parsed them from the mrf/mlf (one plane has no spacing)
        scale_t = ms_t["datasets"][0]["coordinateTransformations"][0]["scale"]
        scale_o = ms_o["datasets"][0]["coordinateTransformations"][0]["scale"]
        assert scale_t[2:] == scale_o[2:] == [0.4, 0.4]
        if z_planes > 1:
            assert scale_t == scale_o == [1.0, 1.5, 0.4, 0.4]
        assert len(attrs(image_t)["omero"]["channels"]) == len(attrs(image_o)["omero"]["channels"]) == 3
        # the same FOVs at the same places (theirs: absolute stage positions; ours: from the well origin)
        rows_t, rows_o = read_roi_table(image_t, "FOV_ROI_table"), read_roi_table(image_o, "FOV_ROI_table")
        assert [r["FieldIndex"] for r in rows_t] == [r["FieldIndex"] for r in rows_o] == [f"FOV_{i}" for i in range(1, 7)]
        for axis in ("x", "y"):
            origin = min(r[f"{axis}_micrometer_original"] for r in rows_t)
            assert [round(r[f"{axis}_micrometer_original"] - origin, 4) for r in rows_t] == \
                   [round(r[f"{axis}_micrometer_original"], 4) for r in rows_o]
            assert [round(r[f"{axis}_micrometer"], 4) for r in rows_t] == [round(r[f"{axis}_micrometer"], 4) for r in rows_o]
        level0_t = zarr.open_array(str(image_t / ms_t["datasets"][0]["path"]), mode="r")[:]
        level0_o = zarr.open_array(str(image_o / "0"), mode="r")[:]
        assert level0_t.shape == level0_o.shape == (3, z_planes, 96, 192)
        np.testing.assert_array_equal(level0_t, level0_o)
