"""Every plate reader ingest can pick (tasks/io/readers/registry.py) keeps the one contract:
it recognises its own input and no other reader's, recognising touches nothing, and reading gives
an Acquisition whose planes are complete, unique and point at files that exist."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from test_imagexpress import imagexpress_folder
from conftest import require
from scene_files import write_positions

from zarrmill.io.readers.planes import plane_exists
from zarrmill.io.readers.registry import PLATE_READERS, ReadOptions, detect, reader


def cellvoyager(cli, root: Path) -> Path:
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={root / 'cv'}",
                       "--set", "wells=[B03,C04]", "--set", "grid=[1,2]", "--set", "shape=[16,24]",
                       "--set", "z_planes=2")
    assert code == 0, err
    return root / "cv"


def scenes(cli, root: Path) -> Path:
    require("bioio", "the scenes reader reads through bioio")
    write_positions(root / "positions.ome.tif")
    return root / "positions.ome.tif"


def generated(fmt: str):
    def make(cli, root: Path) -> Path:
        code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={root / fmt}",
                           "--set", f"format={fmt}", "--set", "wells=[B03,C04]", "--set", "grid=[1,2]",
                           "--set", "shape=[16,24]", "--set", "z_planes=2")
        assert code == 0, err
        return root / fmt
    return make


SAMPLES = {"cellvoyager": cellvoyager, "imagexpress": lambda cli, root: imagexpress_folder(root / "ix"),
           "scenes": scenes, **{f: generated(f) for f in ("cq", "metaxpress", "hcsai", "operetta", "scanr")}}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(f): (f.stat().st_size, f.stat().st_mtime_ns) for f in root.rglob("*")}


def test_every_registered_reader_has_a_sample_here():
    assert sorted(r.format for r in PLATE_READERS) == sorted(SAMPLES)


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_reader_keeps_the_contract(cli, tmp_path, fmt):
    path = SAMPLES[fmt](cli, tmp_path)
    before = snapshot(tmp_path)
    assert detect(path) == fmt
    assert [r.format for r in PLATE_READERS if r.detects(path)] == [fmt], "no other reader claims it"
    assert snapshot(tmp_path) == before, "recognising an input changes nothing"
    acq = reader(fmt).read(path, ReadOptions())
    assert snapshot(tmp_path) == before, "reading metadata changes nothing"
    assert acq.planes and acq.n_c == len(acq.channels) >= 1
    keys = [(p.row, p.col, p.field, p.t, p.c, p.z) for p in acq.planes]
    assert len(set(keys)) == len(keys), "one plane per (well, field, t, c, z)"
    for (row, col), fields in acq.wells().items():
        assert 1 <= row <= acq.n_rows and 1 <= col <= acq.n_cols
        for fld, t, c, z in itertools.product(fields, range(acq.n_t), range(acq.n_c), range(acq.n_z)):
            assert (row, col, fld, t, c, z) in set(keys), f"plane {(row, col, fld, t, c, z)} missing"
    assert all(plane_exists(p.path) for p in acq.planes)
    assert all(s > 0 for s in acq.pixel_size_yx) and acq.z_step > 0
    assert len(acq.image_shape_yx) == 2 and all(n > 0 for n in acq.image_shape_yx)
