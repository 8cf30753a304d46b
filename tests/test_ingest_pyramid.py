"""ingest ``pyramid: true``: the levels are built in the same pass from the regions the units hold
(level 0 never read back), and equal, array for array and in the metadata, what ``ingest`` then
``pyramid`` write; with a small ``volume_mb`` the lowest levels are read back from the last level
built in memory, with the same result."""
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store


def run(cli, *args: str) -> str:
    code, out, err = cli(*args)
    assert code == 0, err
    return out + err


def ingest(cli, src: Path, out: Path, *sets: str) -> str:
    args = ["task", "ingest", "--set", f"input={src}", "--set", f"output={out}"]
    for s in sets:
        args += ["--set", s]
    return run(cli, *args)


def assert_same_images(a: Path, b: Path, images: list[str]) -> int:
    """Every array of every image equal, and the multiscales metadata too; returns the levels seen."""
    levels = 0
    for image in images:
        ga, gb = zarr.open_group(str(a / image), mode="r"), zarr.open_group(str(b / image), mode="r")
        assert sorted(ga.array_keys()) == sorted(gb.array_keys()), image
        for key in ga.array_keys():
            np.testing.assert_array_equal(ga[key][:], gb[key][:], err_msg=f"{image} level {key}")
        assert ga.attrs.asdict()["ome"]["multiscales"] == gb.attrs.asdict()["ome"]["multiscales"], image
        levels = max(levels, len(list(ga.array_keys())))
    return levels


def fields_of(plate: Path) -> list[str]:
    return sorted(str(p.parent.parent.relative_to(plate)) for p in plate.glob("*/*/*/0/zarr.json"))


@pytest.mark.parametrize("volume_mb", [192, 0.05])
def test_a_plate_of_fields_gets_its_pyramid_in_the_same_pass(cli, tmp_path, monkeypatch, volume_mb):
    """Two time points, two channels, six z planes per field, one (t, c) stack per unit: every
    field's levels equal ingest + pyramid's; the plate passes the official schemas and check."""
    monkeypatch.setattr("zarrmill.ingest.BATCH_BYTES", 1)  # units of one write block: many per field
    raw = tmp_path / "raw"
    run(cli, "task", "generate-plate", "--set", f"output={raw}", "--set", "wells=[B03, C04]", "--set", "grid=[1, 2]",
        "--set", "shape=[100, 120]", "--set", "z_planes=6", "--set", "timepoints=2")
    one = tmp_path / "one.zarr"
    said = ingest(cli, raw, one, "pyramid=true", "min_size=16", f"volume_mb={volume_mb}")
    two = tmp_path / "two.zarr"
    ingest(cli, raw, two)
    run(cli, "task", "pyramid", "--set", f"input={two}", "--set", "min_size=16")
    fields = fields_of(one)
    assert len(fields) == 4 and fields == fields_of(two)
    assert assert_same_images(one, two, fields) == 4  # 100x120 -> 50x60 -> 25x30 -> 13x15
    # 192 MB: 4 (t, c) stacks of 6 planes per field, every level from memory; 0.05 MB: one plane
    # per unit (its shard), each level read back (one unit per level and field)
    assert units_run(said) == (4 * 4 if volume_mb == 192 else 4 * 24 + 4 * 3), said
    counts = validate_store(one)
    assert counts["plate"] == 1 and counts["image"] == 4
    assert check_store(one)[0] == []


def units_run(said: str) -> int:
    return int(said.split("done: ")[1].split(" units")[0])


@pytest.mark.parametrize("volume_mb", [192, 8, 0.5])
def test_a_volume_gets_its_pyramid_in_the_same_pass(cli, tmp_path, monkeypatch, volume_mb):
    """A 3D TIFF with anisotropic voxels (z halves from level 2 on), 12 x 600 x 760 in chunks of
    12 x 256 x 256. 192 MB: one unit holds the volume and builds every level; 8 MB: four units of
    12 x 512 x 512 each build level 1 from what they hold, the lower levels are read back from
    level 1; 0.5 MB: every level is read back. All equal ingest + pyramid."""
    monkeypatch.setattr("zarrmill.ingest.IMAGE_UNIT_MB", 1)  # regions no larger than the levels need
    z, y, x = np.mgrid[0:12, 0:600, 0:760]
    rng = np.random.default_rng(3)
    vol = ((np.sin(x / 17) + np.cos(y / 11) + np.sin(z / 3)) * 900 + 3000).astype(np.uint16)
    vol += rng.integers(0, 60, vol.shape, dtype=np.uint16)
    src = tmp_path / "vol.tif"
    tifffile.imwrite(src, vol, imagej=True, resolution=(1 / 0.5, 1 / 0.5), metadata={"axes": "ZYX", "spacing": 1.0})
    one = tmp_path / "one.zarr"
    said = ingest(cli, src, one, "pyramid=true", "min_size=64", f"volume_mb={volume_mb}")
    two = tmp_path / "two.zarr"
    ingest(cli, src, two)
    run(cli, "task", "pyramid", "--set", f"input={two}", "--set", "min_size=64")
    assert assert_same_images(one, two, [""]) == 5  # 600x760 -> 300x380 -> 150x190 -> 75x95 -> 38x48
    shapes = [zarr.open_array(str(one / str(k))).shape for k in range(5)]
    assert shapes[1][0] == 12 and shapes[2][0] == 6, shapes  # z kept at level 1, halved at level 2
    expected = {192: 1, 8: 4 + 3, 0.5: 9 + 4}[volume_mb]  # level-0 regions + read-back units (one a level)
    assert units_run(said) == expected, said
    assert validate_store(one)["image"] == 1
    assert check_store(one)[0] == []


def mean_chain(vol: np.ndarray, factors: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """Every level as a numpy block mean of the one above (rounded half to even), from the source."""
    levels = [vol]
    for fz, fy, fx in factors:
        a = levels[-1].astype(np.float64)
        z, y, x = a.shape
        block = a.reshape(z // fz, fz, y // fy, fy, x // fx, fx).mean(axis=(1, 3, 5))
        levels.append(np.rint(block).astype(vol.dtype))
    return levels


@pytest.mark.parametrize("executor", ["threads", "local"])
def test_a_volume_s_lower_levels_get_smaller_chunks_to_be_built_in_memory(cli, tmp_path, monkeypatch, executor):
    """16 x 512 x 512 in chunks of 16 x 256 x 256 with 2 MB a unit may hold: level 1 (one 2 MB chunk,
    needing all 8 MB of level 0) and level 2 get chunks halved until a 2 MB region of level 0 holds
    whole chunks of both, so four units build them from memory; level 3 would fall below the
    smallest chunk and is read back (one unit). Every level equals a numpy block mean of the one
    above, from the TIFF, on threads and on the local executor's processes (the plan, patched here,
    is made in this process; the workers run its units)."""
    monkeypatch.setattr("zarrmill.pyramid_regions.MIN_CHUNK_BYTES", 16 * 2**10)
    monkeypatch.setattr("zarrmill.ingest.IMAGE_UNIT_MB", 1)
    rng = np.random.default_rng(5)
    vol = rng.integers(0, 4000, (16, 512, 512), dtype=np.uint16)
    vol[:, ::7] = 65535  # odd sums: rounding half to even is exercised
    src = tmp_path / "vol.tif"
    tifffile.imwrite(src, vol, imagej=True, resolution=(2.0, 2.0), metadata={"axes": "ZYX", "spacing": 1.0})
    out = tmp_path / "one.zarr"
    said = run(cli, "task", "ingest", "--executor", executor, "--set", f"input={src}", "--set", f"output={out}",
               "--set", "pyramid=true", "--set", "min_size=64", "--set", "volume_mb=2")
    assert units_run(said) == 4 + 1, said  # level-0 regions building levels 1-2, level 3 read back
    arrays = [zarr.open_array(str(out / str(k)), mode="r") for k in range(4)]
    assert [a.chunks for a in arrays] == [(16, 256, 256), (16, 128, 128), (8, 64, 64), (4, 64, 64)]
    expected = mean_chain(vol, [(1, 2, 2), (2, 2, 2), (2, 2, 2)])
    for k, (arr, ref) in enumerate(zip(arrays, expected)):
        np.testing.assert_array_equal(arr[:], ref, err_msg=f"level {k}")
    assert check_store(out)[0] == []
