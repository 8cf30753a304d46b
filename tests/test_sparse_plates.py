"""Sparse and ragged plates as facilities acquire them: wells imaged with their own channels and time
points (multi-protocol, illumination and QC plates) and fields the instrument failed to image.

Each well of the output carries exactly the channels and time points it was imaged with (its own
omero list), each protocol is an NGFF plate acquisition, and nothing the well never saw is
zero-filled; pixels are checked against what generate-plate rendered (its own truth, not a reader),
in both layouts, for CellVoyager, Operetta and MetaXpress; faim-ipa reads the same CellVoyager
folder (with the settings files a CellVoyager writes) and finds the same planes per well."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import run_task
from test_instrument_peers import FAIM, REPO, venv

from zarrmill.generate_plate import Params as PlateParams
from zarrmill.io.synthetic.cellvoyager import render_field
from zarrmill.io.synthetic.plate_spec import CHANNELS

WELLS = ["B03", "B04", "C03", "C04"]
SETTINGS = {"wells": WELLS, "grid": [1, 2], "shape": [40, 48], "channels": 3, "z_planes": 2, "timepoints": 2,
            "blobs_per_field": 8, "sparse": "mixed", "failed_fields": 1, "pixel_size": 0.5}


def sets(**extra) -> list[str]:
    merged = {**SETTINGS, **extra}
    return [f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in merged.items()]


def generate(cli, raw: Path, fmt: str, **extra) -> PlateParams:
    code, err = run_task(cli, "generate-plate", f"output={raw}", f"format={fmt}", *sets(**extra))
    assert code == 0, err
    return PlateParams(output=str(raw), format=fmt, **{**SETTINGS, **extra})


def expected(p: PlateParams, well: str, field: int, t: int, c: int) -> np.ndarray:
    """(z, y, x) pixels generate-plate rendered for one field, time point and channel."""
    fs = next(f for f in p.fields() if f.well == well and f.index == field)
    return render_field(fs, p.well_canvas(), tuple(p.shape), p.z_planes, c, p.dtype, p.seed + 104_729 * t,
                        p.blobs_per_field * p.grid[0] * p.grid[1], p.blob_radius)


def ome(group: zarr.Group) -> dict:
    return group.attrs.get("ome") or dict(group.attrs)


def well_path(well: str) -> str:
    return f"{well[0]}/{well[1:]}"


@pytest.mark.parametrize("layout", ["fov", "well"])
@pytest.mark.parametrize("fmt", ["cellvoyager", "operetta", "metaxpress"])
def test_each_well_holds_exactly_what_it_was_imaged_with(cli, tmp_path, fmt, layout):
    raw, out = tmp_path / "raw", tmp_path / "plate.ome.zarr"
    p = generate(cli, raw, fmt)
    spec = p.spec()
    shape = ["plate_shape=[8,12]"] if fmt == "metaxpress" else []  # the one format that records no plate
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={out}", f"layout={layout}", *shape)
    assert code == 0, err
    if fmt == "cellvoyager":  # the instrument's own message, once per failed field and time point
        line = next(x for x in err.splitlines() if "ERR records" in x)
        assert "2 fields the instrument could not image" in line and '"Autofocus failed (no focus found)"' in line
    plate = zarr.open_group(str(out), mode="r")
    protocols = {(tuple(spec.channels_of(w)), tuple(spec.times_of(w))) for w in WELLS}
    assert len(ome(plate)["plate"]["acquisitions"]) == len(protocols) == 3
    acquisition_of: dict[tuple, int] = {}
    for well in WELLS:
        group = plate[well_path(well)]
        images = ome(group)["well"]["images"]
        own = (tuple(spec.channels_of(well)), tuple(spec.times_of(well)))
        # wells of one protocol share one plate acquisition, different protocols never do
        assert acquisition_of.setdefault(own, images[0]["acquisition"]) == images[0]["acquisition"]
        fields = [f for f in range(1, 3) if not spec.failed(well, f)]
        assert len(images) == (len(fields) if layout == "fov" else 1)
        for k, im in enumerate(images):
            image = group[im["path"]]
            labels = [ch["label"] for ch in ome(image)["omero"]["channels"]]
            assert labels == [CHANNELS[c][0] for c in spec.channels_of(well)], (well, labels)
            level0 = np.asarray(image["0"][:])
            assert level0.shape[:2] == (len(spec.times_of(well)), len(spec.channels_of(well)))
            for ti, t in enumerate(spec.times_of(well)):
                for ci, c in enumerate(spec.channels_of(well)):
                    if layout == "fov":
                        np.testing.assert_array_equal(level0[ti, ci], expected(p, well, fields[k], t, c))
                        continue
                    for f in (1, 2):  # fields side by side (grid 1 x 2, no overlap): field 2 right of field 1
                        x0 = (f - 1) * p.shape[1]
                        got = level0[ti, ci, :, :p.shape[0], x0:x0 + p.shape[1]]
                        want = np.zeros_like(got) if spec.failed(well, f) else expected(p, well, f, t, c)
                        np.testing.assert_array_equal(got, want, err_msg=f"{well} field {f} t{t} c{c}")
    assert len(set(acquisition_of.values())) == 3
    code, out_text, err = cli("check", str(out))
    assert code == 0, out_text + err


def test_faim_ipa_reads_a_sparse_cellvoyager_folder_as_zarrmill_does(cli, tmp_path):
    """faim-ipa needs the .mes the mrf names (it refused generated folders before): it reads each
    well's planes, which match the records zarrmill's parts keep, and the channel colours."""
    from zarrmill.io.readers.registry import ReadOptions, reader

    python = venv(FAIM, "faim-ipa (tests/peers/faim-requirements.txt)")
    raw = tmp_path / "raw"
    p = generate(cli, raw, "cellvoyager")
    assert sorted(f.name for f in raw.iterdir() if f.suffix in (".mes", ".wpi", ".wpp")) == \
        ["synthetic-plate.mes", "synthetic-plate.wpi", "synthetic_96well.wpp"]
    done = subprocess.run([str(python), str(REPO / "tests" / "peers" / "faim_cellvoyager.py"), str(raw)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs["wells"] == WELLS
    assert theirs["yx_spacing"] == [0.5, 0.5]
    assert theirs["channels"] == {"1": "#FF0000FF", "2": "#FF00FF00", "3": "#FFFF0000"}
    acq = reader("cellvoyager").read(raw, ReadOptions())
    parts = {(pl.row, pl.col): part for part in acq.parts() for pl in part.planes}
    for well, tiles in theirs["tiles"].items():
        rc = (ord(well[0]) - 64, int(well[1:]))
        part = parts[rc]
        planes = [pl for pl in part.planes if (pl.row, pl.col) == rc]
        y0, x0 = min(pl.y_um for pl in planes), min(pl.x_um for pl in planes)
        # faim-ipa counts each well's channels and time points from its own first; ours index the
        # well's own lists: the same number of each, the same planes at the same places
        cs = sorted({t[1] for t in tiles})
        ts = sorted({t[0] for t in tiles})
        assert len(cs) == len(part.channels) == len(p.spec().channels_of(well))
        assert len(ts) == part.n_t == len(p.spec().times_of(well))
        ty0, tx0 = min(t[3] for t in tiles), min(t[4] for t in tiles)
        assert sorted([ts.index(t[0]), cs.index(t[1]), t[2], t[3] - ty0, t[4] - tx0] for t in tiles) == sorted(
            [pl.t, pl.c, pl.z, round((pl.y_um - y0) / 0.5), round((pl.x_um - x0) / 0.5)] for pl in planes)


def test_missing_planes_cost_no_read_and_no_write(cli, tmp_path, monkeypatch):
    """A metadata-only measurement (files gone) with missing: zeros does no pixel work for a missing
    plane (no array of zeros goes through the writer) and writes no chunk of it: the arrays exist,
    read as zeros, and hold no chunk files; planes that exist are written."""
    from zarrmill import ingest

    raw, out = tmp_path / "raw", tmp_path / "plate.ome.zarr"
    generate(cli, raw, "cellvoyager", sparse="qc", failed_fields=0)
    gone = sorted(raw.glob("*_B03_*.tif")) + sorted(raw.glob("*_B04_*.tif"))
    for f in gone:
        f.unlink()
    written = []
    real = ingest.write_region
    monkeypatch.setattr(ingest, "write_region", lambda arr, start, data: (written.append(str(arr.store_path)), real(arr, start, data))[1])
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={out}", "missing=zeros")
    assert code == 0, err
    assert written and not [w for w in written if "B/03" in w or "B/04" in w], written
    for well, present in (("B/03", False), ("B/04", False), ("C/03", True)):
        for field in ("0", "1"):
            arr = out / well / field / "0"
            chunks = [c for c in arr.rglob("*") if c.is_file() and c.name != "zarr.json"]
            data = np.asarray(zarr.open_array(str(arr), mode="r")[:])
            assert bool(chunks) == present and bool(data.any()) == present, (well, field, len(chunks))
    image = zarr.open_group(str(out / "B/03/0"), mode="r")
    assert len(image.attrs["zarrmill"]["missing_planes"]) == 2  # one channel, one time point, 2 z


def test_reshard_keeps_each_wells_own_channels_and_leaves_the_overview_out(cli, tmp_path):
    """reshard of a sparse per-FOV plate: each well image has its own channels, time points and
    acquisition; the FOV ROI table lists the fields the instrument imaged; no overview (its wells
    differ in channels), said in one warning line; check passes."""
    from zarrmill.io.ngff.fov_table import read_roi_table

    raw, fov, wells = tmp_path / "raw", tmp_path / "plate.ome.zarr", tmp_path / "wells.ome.zarr"
    p = generate(cli, raw, "cellvoyager")
    spec = p.spec()
    assert run_task(cli, "ingest", f"input={raw}", f"output={fov}")[0] == 0
    code, err = run_task(cli, "reshard", f"input={fov}", f"output={wells}", "overview=true")
    assert code == 0, err
    assert "no plate overview" in err and not (wells / "overview").exists()
    plate = zarr.open_group(str(wells), mode="r")
    source = zarr.open_group(str(fov), mode="r")
    for well in WELLS:
        image = plate[well_path(well)]["well"]
        labels = [ch["label"] for ch in ome(image)["omero"]["channels"]]
        assert labels == [CHANNELS[c][0] for c in spec.channels_of(well)]
        assert image["0"].shape[:2] == (len(spec.times_of(well)), len(spec.channels_of(well)))
        assert ome(plate[well_path(well)])["well"]["images"][0]["acquisition"] == \
            ome(source[well_path(well)])["well"]["images"][0]["acquisition"]
        fields = [f for f in (1, 2) if not spec.failed(well, f)]
        assert len(read_roi_table(wells / well_path(well) / "well", "FOV_ROI_table")) == len(fields)
    code, out, err = cli("check", str(wells))
    assert code == 0, out + err


def test_a_well_imaged_by_two_timelines_has_both_in_timeline_order(cli, tmp_path):
    """Each CellVoyager timeline counts its time points from 1: a well imaged by timeline 1 and
    timeline 2 has two time points (timeline order), not two files for one plane."""
    import re

    import tifffile

    raw, out = tmp_path / "raw", tmp_path / "plate.ome.zarr"
    code, err = run_task(cli, "generate-plate", f"output={raw}", "wells=[B03]", "grid=[1,1]", "channels=1",
                         "shape=[16,16]", "blobs_per_field=2")
    assert code == 0, err
    first = next(raw.glob("*.tif"))
    second = first.with_name(first.name.replace("L01A01", "L02A01"))
    later = tifffile.imread(first) + 7
    tifffile.imwrite(second, later)
    mlf = raw / "MeasurementData.mlf"
    text = mlf.read_text()
    record = re.search(r"<bts:MeasurementRecord .*?</bts:MeasurementRecord>", text).group(0)
    again = record.replace('bts:TimelineIndex="1"', 'bts:TimelineIndex="2"').replace(first.name, second.name)
    mlf.write_text(text.replace(record, again + "\n" + record))  # listed first, imaged later
    code, err = run_task(cli, "ingest", f"input={raw}", f"output={out}")
    assert code == 0, err
    level0 = np.asarray(zarr.open_array(str(out / "B/03/0/0"), mode="r")[:])
    assert level0.shape == (2, 1, 1, 16, 16)
    np.testing.assert_array_equal(level0[0, 0, 0], tifffile.imread(first))
    np.testing.assert_array_equal(level0[1, 0, 0], later)
