"""Tasks validate the input metadata they copy before writing anything, so nothing zarrmill writes
fails its own ``check`` (#27 item 2): duplicate axis names, levels of different dtypes, a level with
the wrong number of dimensions and non-finite transforms are one line naming the field, exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrmill.io.ngff.metadata import Level, make_axes, write_image_metadata


def image(root: Path, dtypes=("uint16", "uint16"), axes="zyx") -> Path:
    shapes = [(4, 32, 32), (4, 16, 16)]
    for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        arr = zarr.create_array(str(root / str(k)), shape=shape, chunks=(2, 16, 16), dtype=dtype)
        arr[...] = np.arange(np.prod(shape)).reshape(shape).astype(dtype) % 200
    write_image_metadata(root, "0.5", make_axes(axes), [Level("0", [1.0, 0.5, 0.5], None),
                                                         Level("1", [1.0, 1.0, 1.0], None)])
    return root


def edit_multiscales(root: Path, change) -> None:
    doc = json.loads((root / "zarr.json").read_text())
    change(doc["attributes"]["ome"]["multiscales"][0])
    (root / "zarr.json").write_text(json.dumps(doc))


def duplicate_axes(ms):
    ms["axes"][0]["name"] = "y"


def nan_scale(ms):
    ms["datasets"][1]["coordinateTransformations"][0]["scale"][2] = float("nan")


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


CASES = {
    "duplicate axes": (lambda p: edit_multiscales(image(p), duplicate_axes), "name y more than once"),
    "level dtypes differ": (lambda p: image(p, ("uint16", "float32")), "level '1' is float32 but level '0' is uint16"),
    "NaN scale": (lambda p: edit_multiscales(image(p), nan_scale), "must hold positive finite numbers"),
    "axes fewer than dimensions": (lambda p: edit_multiscales(image(p), lambda ms: ms["axes"].pop(0)),
                                   "scale of 3 values but multiscales lists 2 axes"),
}
TASKS = {
    "rechunk": ["chunks=[2,8,8]"],
    "pyramid": [],
    "compress": ["format=zarr", "patch=[2,8,8]", "codec=lz4"],
    "patch-extract": ["mode=grid", "tile=[2,8,8]"],
}


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_input_metadata_is_one_line_and_writes_nothing(cli, tmp_path, task, case):
    make, says = CASES[case]
    src = tmp_path / "in.ome.zarr"
    make(src)
    before = files(tmp_path)
    args = ["task", task, "--executor", "sync", "--set", f"input={src}"]
    if task != "pyramid":
        args += ["--set", f"output={tmp_path / 'out.zarr'}"]
    for s in TASKS[task]:
        args += ["--set", s]
    code, _, err = cli(*args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and says in lines[0] and str(src) in lines[0], err
    assert files(tmp_path) == before  # the input untouched, no output made
    assert not (tmp_path / "out.zarr").exists()


def test_a_valid_image_passes_every_task(cli, tmp_path):  # the cases above fail for their defect only
    src = image(tmp_path / "in.ome.zarr")
    for task, sets in TASKS.items():
        if task == "pyramid":  # it adds levels to an image that has level 0 only
            src = tmp_path / "one-level.ome.zarr"
            zarr.create_array(str(src / "0"), shape=(4, 512, 512), chunks=(2, 64, 64), dtype="uint16")
            write_image_metadata(src, "0.5", make_axes("zyx"), [Level("0", [1.0, 0.5, 0.5], None)])
        args = ["task", task, "--executor", "sync", "--set", f"input={src}"]
        if task != "pyramid":
            args += ["--set", f"output={tmp_path / (task + '.zarr')}"]
        for s in sets:
            args += ["--set", s]
        code, _, err = cli(*args)
        assert code == 0, (task, err)
        src = tmp_path / "in.ome.zarr"
