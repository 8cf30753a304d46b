"""ROI tables are written without anndata (its import and writes cost seconds a step); they must
read back with anndata and ngio exactly as the table anndata itself writes, in zarr v3 and v2."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrmill.errors import OutputExistsError
from zarrmill.io.ngff.fov_table import TABLE, WELL_TABLE, read_roi_table, write_roi_tables
from zarrmill.io.storage.guard import OutputGuard

FOVS = [{"FieldIndex": f"FOV_{i}", "z_micrometer": 0.0, "len_z_micrometer": 1.0, "y_micrometer": 0.1 * i,
         "len_y_micrometer": 208.0, "x_micrometer": 200.0 * i, "len_x_micrometer": 200.0, "x_pixel": 640 * i, "len_x_pixel": 640, "source_path": f"B/03/{i}"}
        for i in range(1, 4)]
WELL = {"FieldIndex": "well_1", "z_micrometer": 0.0, "len_z_micrometer": 1.0, "y_micrometer": 0.0,
        "len_y_micrometer": 416.0, "x_micrometer": 0.0, "len_x_micrometer": 600.0}


def _reference(group: zarr.Group, name: str, rows: list[dict]) -> None:
    """The same table written by anndata (pandas frame -> AnnData -> write_elem)."""
    import anndata as ad
    import pandas as pd
    from anndata.io import write_elem

    frame = pd.DataFrame(rows).set_index("FieldIndex")
    floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
    table = ad.AnnData(X=frame[floats].to_numpy(np.float64), obs=frame[[c for c in frame.columns if c not in floats]],
                       var=pd.DataFrame(index=floats))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_elem(group, name, table)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_tables_read_back_as_anndatas_own(tmp_path: Path, zarr_format: int) -> None:
    from anndata.io import read_elem

    ours, ref = tmp_path / "ours", tmp_path / "ref"
    guard = OutputGuard(ours)
    guard.claim("t")  # zarrmill's own store, as a step's output is
    zarr.open_group(str(ours), mode="a", zarr_format=zarr_format)
    ref_tables = zarr.open_group(str(ref), mode="w", zarr_format=zarr_format).require_group("tables")
    write_roi_tables(ours, FOVS, WELL, "/src/plate.zarr", guard)
    write_roi_tables(ours, FOVS, WELL, "/src/plate.zarr", guard)  # a rerun replaces, same content
    for name, rows in ((TABLE, FOVS), (WELL_TABLE, [WELL])):
        _reference(ref_tables, name, rows)
        a = read_elem(zarr.open_group(str(ours / "tables" / name), mode="r"))
        b = read_elem(zarr.open_group(str(ref / "tables" / name), mode="r"))
        assert list(a.obs_names) == list(b.obs_names) == [r["FieldIndex"] for r in rows]
        assert list(a.var_names) == list(b.var_names)
        np.testing.assert_array_equal(np.asarray(a.X), np.asarray(b.X))
        # the same values; numbers of the same dtype. Text: anndata >= 0.13 with pandas 3 writes it
        # as nullable-string-array (read back as a pandas string dtype); zarrmill keeps string-array,
        # which every anndata reads (Fractal's pinned ones too), read back as object
        assert a.obs.astype(object).equals(b.obs.astype(object))
        numeric = [c for c in b.obs.columns if b.obs[c].dtype.kind in "iufb"]
        assert [a.obs[c].dtype for c in numeric] == [b.obs[c].dtype for c in numeric]
        attrs = dict(zarr.open_group(str(ours / "tables" / name), mode="r").attrs)
        assert attrs["type"] == "roi_table" and attrs["zarrmill_source_plate"] == "/src/plate.zarr"
    assert read_roi_table(ours) == [{k: float(v) if isinstance(v, float) else v for k, v in r.items()} for r in FOVS]
    tables = zarr.open_group(str(ours / "tables"), mode="r")
    assert tables.attrs["tables"] == [TABLE, WELL_TABLE]


def test_ngio_reads_the_rois(tmp_path: Path) -> None:
    from ngio import open_ome_zarr_container

    from zarrmill.io.ngff.metadata import Level, make_axes, write_image_metadata

    image = tmp_path / "img.zarr"
    zarr.create_array(str(image / "0"), shape=(1, 416, 1920), chunks=(1, 208, 640), dtype="uint16")
    write_image_metadata(image, "0.5", make_axes("zyx"), [Level("0", [1.0, 1.0, 1.0], None)])
    write_roi_tables(image, FOVS, WELL, "/src", OutputGuard(image))
    table = open_ome_zarr_container(str(image)).get_table(TABLE)
    roi = table.get("FOV_2")
    assert roi is not None
    x, y = roi.get("x"), roi.get("y")
    assert (x.start, x.length, y.start, y.length) == (400.0, 200.0, 0.2, 208.0)


def test_a_table_zarrmill_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    """Replacing a table goes through the output guard: in an image zarrmill did not create, another
    tool's FOV_ROI_table stays as it was, and the refusal is one error naming it."""
    image = tmp_path / "theirs.zarr"
    tables = zarr.open_group(str(image), mode="w", zarr_format=3).require_group("tables")
    _reference(tables, TABLE, FOVS[:1])
    before = {p: p.read_bytes() for p in sorted(image.rglob("*")) if p.is_file()}
    guard = OutputGuard(image, in_place=True)
    with pytest.raises(OutputExistsError, match=f"{TABLE}: exists and was not created by zarrmill"):
        write_roi_tables(image, FOVS, WELL, "/src/plate.zarr", guard)
    assert {p: p.read_bytes() for p in sorted(image.rglob("*")) if p.is_file()} == before


def test_a_table_folder_outside_the_tables_list_is_never_written_into(tmp_path: Path) -> None:
    """Whether a table is there is looked up at its path, not read from the tables group's list: a
    neighbour's FOV_ROI_table folder in an image with no tables group yet is refused, unchanged."""
    image = tmp_path / "theirs.zarr"
    zarr.open_group(str(image), mode="w", zarr_format=3)
    planted = image / "tables" / TABLE
    planted.mkdir(parents=True)
    (planted / "notes.txt").write_text("a colleague's")
    before = {p: p.read_bytes() for p in sorted(image.rglob("*")) if p.is_file()}
    guard = OutputGuard(image, in_place=True)
    with pytest.raises(OutputExistsError, match=f"{TABLE}: exists and was not created by zarrmill"):
        write_roi_tables(image, FOVS, WELL, "/src/plate.zarr", guard)
    assert {p: p.read_bytes() for p in sorted(image.rglob("*")) if p.is_file()} == before


@pytest.mark.parametrize("owned", [True, False])
def test_tables_are_never_written_through_a_planted_link(tmp_path: Path, owned: bool) -> None:
    """A neighbour's link at image/tables leading out of the output: writing the ROI tables is
    refused in one error, and nothing lands where the link points (owned or in-place output)."""
    import os

    from zarrmill.errors import UnsafeOutputError

    image, outside = tmp_path / "img.zarr", tmp_path / "theirs"
    outside.mkdir()
    guard = OutputGuard(image, in_place=not owned)
    if owned:
        guard.claim("t")
    zarr.open_group(str(image), mode="a", zarr_format=3)
    os.symlink(outside, image / "tables")
    with pytest.raises(UnsafeOutputError, match="outside the output"):
        write_roi_tables(image, FOVS, WELL, "/src/plate.zarr", guard)
    assert list(outside.iterdir()) == []
