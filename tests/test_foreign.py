"""Stores other tools wrote, in: a Fractal-style 0.4 plate (zarr v2, string channel windows,
AnnData ROI tables) through rechunk, pyramid and reshard. Outputs are valid by the official
schemas, tables are kept, pixels are equal, the coercion is one warning line, no traceback."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from fractal_fixture import fractal_plate
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store


def run(cli, task: str, *sets: str) -> str:
    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 0 and "Traceback" not in err, err
    return err


def files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in root.rglob("*") if f.is_file()}


@pytest.fixture
def plate(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path / "fractal.zarr"
    return path, fractal_plate(path)


def test_the_fixture_is_what_the_schemas_reject(plate):
    path, _ = plate
    problems = check_store(path)[0]
    assert problems and all("window" in p for p in problems), problems


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_rechunk_of_a_fractal_image_is_valid_and_keeps_its_tables(cli, plate, tmp_path, version):
    from ngio import open_ome_zarr_container

    path, pixels = plate
    before = files(path)
    out = tmp_path / f"copy{version}.zarr"
    err = run(cli, "rechunk", f"input={path / 'B' / '03' / '0'}", f"output={out}", f"ngff_version={version}")
    warnings = [line for line in err.splitlines() if line.startswith("zarrmill: warning:")]
    assert len(warnings) == 1 and "window values stored as text" in warnings[0], err
    assert files(path) == before, "the input is only read"
    validate_store(out)
    assert check_store(out)[0] == []
    np.testing.assert_array_equal(zarr.open_array(str(out / "0"))[:], pixels["B/03"])
    container = open_ome_zarr_container(str(out))
    assert set(container.list_tables()) == {"FOV_ROI_table", "well_ROI_table"}
    fov = container.get_table("FOV_ROI_table").get("2")
    np.testing.assert_array_equal(np.squeeze(container.get_image().get_roi(fov)), pixels["B/03"][..., 48:])
    attrs = json.loads((out / "zarr.json").read_text())["attributes"]["ome"] if version == "0.5" else \
        json.loads((out / ".zattrs").read_text())
    assert attrs["omero"]["channels"][0]["window"] == {"min": 0, "max": 65535, "start": 110, "end": 800}


def test_pyramid_on_a_fractal_plate_adds_levels_and_leaves_it_valid(cli, tmp_path):
    path = tmp_path / "fractal.zarr"
    pixels = fractal_plate(path, levels=1)
    level0 = {k: v for k, v in files(path).items() if "/0/0/" in f"/{k}" or "/tables/" in f"/{k}"}
    run(cli, "pyramid", f"input={path}", "min_size=8")
    after = files(path)
    assert {k: after[k] for k in level0} == level0, "level 0 and the tables are untouched"
    validate_store(path)
    assert check_store(path)[0] == [], "the string windows were written back as numbers"
    assert zarr.open_array(str(path / "B" / "03" / "0" / "1")).shape == (2, 2, 16, 48)
    np.testing.assert_array_equal(zarr.open_array(str(path / "B" / "05" / "0" / "0"))[:], pixels["B/05"])


def test_reshard_of_a_fractal_plate_is_a_valid_plate_with_the_same_pixels(cli, plate, tmp_path):
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    path, pixels = plate
    before = files(path)
    run(cli, "reshard", f"input={path}", "min_size=8", "overview=true", "overview_size=16")
    out = tmp_path / "fractal-wells.zarr"
    assert files(path) == before
    validate_store(out)
    assert check_store(out)[0] == []
    for well, data in pixels.items():
        np.testing.assert_array_equal(zarr.open_array(str(out / well / "well" / "0"))[:], data)
    assert list(Reader(parse_url(str(out)))())[0].data[0].shape[-2:] == (32, 2 * 96)


def test_a_bioformats2raw_container_names_its_images(cli, tmp_path):
    root = tmp_path / "bf2raw.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    group.attrs["bioformats2raw.layout"] = 3
    fractal_plate(tmp_path / "x.zarr")  # any image will do as series 0
    import shutil

    shutil.copytree(tmp_path / "x.zarr" / "B" / "03" / "0", root / "0")
    code, _, err = cli("task", "rechunk", "--executor", "sync", "--set", f"input={root}",
                       "--set", f"output={tmp_path / 'out.zarr'}")
    assert code == 2 and "bioformats2raw container" in err and str(root / "0") in err, err
    assert len(err.strip().splitlines()) == 1
    run(cli, "rechunk", f"input={root / '0'}", f"output={tmp_path / 'out.zarr'}")


def test_compress_to_zarr_keeps_a_fractal_images_tables(cli, plate, tmp_path):
    from ngio import open_ome_zarr_container

    path, pixels = plate
    out = tmp_path / "compressed.zarr"
    run(cli, "compress", f"input={path / 'B' / '05' / '0'}", f"output={out}", "format=zarr", "patch=[2,16,16]")
    image = next(p.parent for p in out.glob("*/zarr.json"))
    np.testing.assert_array_equal(zarr.open_array(str(image / "0"))[:], pixels["B/05"])
    container = open_ome_zarr_container(str(image))
    assert set(container.list_tables()) == {"FOV_ROI_table", "well_ROI_table"}
    fov = container.get_table("FOV_ROI_table").get("1")
    np.testing.assert_array_equal(np.squeeze(container.get_image().get_roi(fov)), pixels["B/05"][..., :48])


def test_outputs_from_a_fractal_plate_open_in_every_reader(cli, plate, tmp_path):
    from test_readers import READERS

    path, pixels = plate
    run(cli, "reshard", f"input={path}", "min_size=8")
    copy = tmp_path / "copy.zarr"
    run(cli, "rechunk", f"input={path / 'B' / '05' / '0'}", f"output={copy}")
    for name, reader in READERS.items():
        np.testing.assert_array_equal(np.squeeze(reader(copy)), np.squeeze(pixels["B/05"]), err_msg=name)
        for well, data in pixels.items():
            got = reader(tmp_path / "fractal-wells.zarr" / well / "well")
            np.testing.assert_array_equal(np.squeeze(got), np.squeeze(data), err_msg=f"{name} {well}")


def test_a_rerun_replaces_the_carried_tables_so_a_dropped_table_does_not_linger(cli, plate, tmp_path):
    """The copy's tables are the input's as they are now: an earlier copy is removed (through the
    output guard) before the new one is made, not merged into."""
    path, _ = plate
    image, out = path / "B" / "03" / "0", tmp_path / "copy.zarr"
    run(cli, "rechunk", f"input={image}", f"output={out}")
    assert (out / "tables" / "well_ROI_table").is_dir()
    shutil.rmtree(image / "tables" / "well_ROI_table")
    tables = zarr.open_group(str(image / "tables"), mode="a", zarr_format=2)
    tables.attrs["tables"] = ["FOV_ROI_table"]
    run(cli, "rechunk", f"input={image}", f"output={out}")  # the input changed: the step is redone
    assert sorted(p.name for p in (out / "tables").iterdir() if not p.name.startswith(".")) == ["FOV_ROI_table"]
    assert zarr.open_group(str(out / "tables"), mode="r").attrs["tables"] == ["FOV_ROI_table"]
