"""Bad input for every instrument format is one line, exit 2, and nothing written: a truncated
metadata file, a record naming a missing file, a pixel size of 0, a well outside the plate. And
the shared reading path: two instruments' markers in one folder, an option for another format,
absent planes and assumed values are each said, never guessed silently."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

FORMATS = ("cq", "metaxpress", "imagexpress", "hcsai", "operetta", "scanr")


def generate(cli, raw: Path, fmt: str, *sets: str) -> None:
    args = ["task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", f"format={fmt}",
            "--set", "wells=[B03,C04]", "--set", "grid=[1,2]", "--set", "shape=[16,24]", "--set", "z_planes=2"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 0, err


def metadata_file(raw: Path, fmt: str) -> Path:
    pattern = {"cq": "MeasurementData.mlf", "hcsai": "*.csv", "operetta": "Index.idx.xml",
               "scanr": "metadata.ome.xml", "imagexpress": "*.HTD"}.get(fmt)
    return next(raw.rglob(pattern)) if pattern else None


def ingest(cli, raw: Path, out: Path, *sets: str):
    args = ["task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}"]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def snapshot(root: Path) -> dict[str, int]:
    return {str(f): f.stat().st_size for f in root.rglob("*")}


def one_line(code: int, err: str, out: Path, *needles: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("zarrmill: error")]
    assert code == 2 and len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert not out.exists(), "a refused input writes nothing"


def truncate(raw: Path, fmt: str) -> str:
    if fmt == "metaxpress":  # its metadata is in each TIFF: cut one
        f = next(p for p in raw.rglob("*.tif") if "_thumb" not in p.name)
        f.write_bytes(f.read_bytes()[:50])
        return f.name
    f = metadata_file(raw, fmt)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if fmt != "imagexpress" else b'"HTSInfoFile", Version 1.0\n"Desc')
    return f.name


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncated_metadata_file_is_one_line(cli, tmp_path, fmt):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, fmt)
    name = truncate(raw, fmt)
    before = snapshot(tmp_path)
    code, _, err = ingest(cli, raw, out, f"format={fmt}", *(["plate_shape=[8,12]"] if fmt == "hcsai" else []))
    one_line(code, err, out, name)
    assert snapshot(tmp_path) == before


def named_plane(raw: Path, fmt: str) -> Path:
    """One image file the metadata names (for metaxpress the file is the record: a site's wave 2 of z 2)."""
    exclude = ("_thumb",)
    files = sorted(p for p in raw.rglob("*.tif*") if not any(e in p.name for e in exclude))
    return files[-1]


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f not in ("metaxpress", "imagexpress")])
def test_a_record_naming_a_missing_file_is_one_line(cli, tmp_path, fmt):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, fmt)
    gone = named_plane(raw, fmt)
    gone.unlink()
    code, _, err = ingest(cli, raw, out, *(["plate_shape=[8,12]"] if fmt == "hcsai" else []))
    one_line(code, err, out, gone.name, "missing")


PIXEL_SIZE = {"cq": (r'bts:HorizontalPixelDimension="[^"]+"', 'bts:HorizontalPixelDimension="0"'),
              "operetta": (r'<ImageResolutionX Unit="m">[^<]+<', '<ImageResolutionX Unit="m">0<'),
              "scanr": (r'PhysicalSizeX="[^"]+"', 'PhysicalSizeX="0"'),
              "hcsai": (r'"PixelWidth": [0-9.]+', '"PixelWidth": 0')}


@pytest.mark.parametrize("fmt", sorted(PIXEL_SIZE) + ["metaxpress"])
def test_a_pixel_size_of_zero_is_one_line(cli, tmp_path, fmt):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, fmt)
    if fmt == "metaxpress":
        for f in raw.rglob("*.tif"):
            import tifffile

            with tifffile.TiffFile(f) as tf:
                desc, data = tf.pages[0].description, tf.asarray()
            tifffile.imwrite(f, data, description=desc.replace('id="spatial-calibration-x" type="float" value="0.325"',
                                                               'id="spatial-calibration-x" type="float" value="0"'),
                             software="MetaSeries", metadata=None)
    else:
        f = metadata_file(raw, fmt) if fmt != "cq" else raw / "MeasurementDetail.mrf"
        f = next(raw.rglob("*.jdce")) if fmt == "hcsai" else f
        pattern, new = PIXEL_SIZE[fmt]
        f.write_text(re.sub(pattern, new, f.read_text(encoding="utf-8"), count=1), encoding="utf-8")
    code, _, err = ingest(cli, raw, out, *(["plate_shape=[8,12]"] if fmt in ("hcsai", "metaxpress") else []))
    one_line(code, err, out, "0")
    assert "> 0" in err or "positive" in err


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_well_outside_the_plate_is_one_line(cli, tmp_path, fmt):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, fmt, "plate_shape=[2,3]" if fmt not in ("metaxpress", "hcsai") else "plate_shape=[8,12]")
    sets = ["plate_shape=[2,3]"] if fmt in ("metaxpress", "hcsai") else []
    if fmt == "scanr":  # W numbers wells over the plate: a number past its last well
        f = metadata_file(raw, fmt)
        f.write_text(f.read_text(encoding="utf-8").replace('Rows="2" Columns="3"', 'Rows="1" Columns="3"'),
                     encoding="utf-8")
    code, _, err = ingest(cli, raw, out, *sets)
    one_line(code, err, out, "outside the")


def test_two_instruments_markers_in_one_folder_are_an_error_not_an_order(cli, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw / "a", "operetta")
    generate(cli, raw / "b", "scanr")
    code, _, err = ingest(cli, raw, out)
    one_line(code, err, out, "operetta and scanr")


def test_an_option_for_another_format_is_refused(cli, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, "operetta")
    code, _, err = ingest(cli, raw, out, "mlf=MeasurementData.mlf")
    one_line(code, err, out, "mlf is for cellvoyager/cq", "this input is operetta")


def test_absent_planes_and_assumed_values_are_warning_lines(cli, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, "hcsai")
    table = next(raw.rglob("*.csv"))
    lines = table.read_text().splitlines()
    table.write_text("\n".join(lines[:-1]) + "\n")  # one plane of the last field no longer listed
    code, _, err = ingest(cli, raw, out, "allow_extra_files=true")
    assert code == 0, err
    assert "1 fields lack planes the others have, written as zeros" in err
    assert "no plate format recorded; assumed 12 wells (3 x 4)" in err


def test_metaxpress_without_calibration_says_what_it_assumed(cli, tmp_path):
    import tifffile

    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw, "metaxpress")
    for f in raw.rglob("*.tif"):
        with tifffile.TiffFile(f) as tf:
            data = tf.asarray()
        tifffile.imwrite(f, data)  # no MetaSeries tags at all
    code, _, err = ingest(cli, raw, out, "plate_shape=[8,12]")
    assert code == 0, err
    assert "pixel size assumed 1.0 micrometer" in err and "no MetaSeries stage position" in err


def test_a_cq_projection_beside_its_stack_is_left_out_unless_asked(cli, tmp_path):
    raw = tmp_path / "raw"
    generate(cli, raw, "cq", "projections=true")
    code, _, err = ingest(cli, raw, tmp_path / "stack.zarr")
    assert code == 0 and "z projections left out" in err, err
    code, _, err = ingest(cli, raw, tmp_path / "mip.zarr", "projections=only")
    assert code == 0, err
    import zarr

    assert zarr.open_array(str(tmp_path / "stack.zarr" / "B" / "03" / "0" / "0")).shape[-3] == 2
    assert zarr.open_array(str(tmp_path / "mip.zarr" / "B" / "03" / "0" / "0")).shape[-3] == 1


ALL_FORMATS = ("cellvoyager",) + FORMATS


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_every_format_round_trips_a_time_series_in_both_layouts(cli, tmp_path, fmt):
    """Pixels against what the generator rendered (not against zarrmill's reading of the files),
    per field, time point, channel and z; layout well on the threads executor; check passes on the
    folder and on both outputs."""
    import numpy as np
    import zarr

    from zarrmill.generate_plate import Params as GenParams
    from zarrmill.io.synthetic.cellvoyager import render_field

    raw = tmp_path / "raw"
    sets = ["timepoints=2", "channels=2", "plate_shape=[8,12]"]
    generate(cli, raw, fmt, *sets)
    gen = GenParams(output=str(raw), format=fmt, wells=["B03", "C04"], grid=[1, 2], shape=[16, 24], z_planes=2,
                    timepoints=2, channels=2, plate_shape=[8, 12])
    extra = ["plate_shape=[8,12]"] if fmt in ("metaxpress", "hcsai") else []
    code, _, err = ingest(cli, raw, tmp_path / "fov.zarr", *extra)
    assert code == 0, err
    code, _, err = cli("task", "ingest", "--executor", "threads", "--set", f"input={raw}",
                       "--set", f"output={tmp_path / 'well.zarr'}", "--set", "layout=well", "--set", "min_size=8",
                       *[a for s in extra for a in ("--set", s)])
    assert code == 0, err
    n_blobs = gen.blobs_per_field * gen.grid[0] * gen.grid[1]
    for i, fs in enumerate(gen.fields()):
        data = np.asarray(zarr.open_array(str(tmp_path / "fov.zarr" / fs.well[0] / fs.well[1:] / str(fs.index - 1) / "0"),
                                          mode="r")[:])
        assert data.shape == (2, 2, 2, 16, 24)
        for t in range(2):
            for c in range(2):
                expected = render_field(fs, gen.well_canvas(), (16, 24), 2, c, "uint16", gen.seed + 104_729 * t,
                                        n_blobs, gen.blob_radius)
                np.testing.assert_array_equal(data[t, c], expected, err_msg=f"{fs.well} field {fs.index} t{t} c{c}")
        assert not np.array_equal(data[0], data[1]), "time points differ"
    well = np.asarray(zarr.open_array(str(tmp_path / "well.zarr" / "B" / "03" / "well" / "0"), mode="r")[:])
    assert well.shape[:3] == (2, 2, 2)
    for target in (raw, tmp_path / "fov.zarr", tmp_path / "well.zarr"):
        code, out, err = cli("check", str(target))
        assert code == 0, out + err


def test_a_truncated_multi_series_ome_tiff_is_one_line_not_a_single_image(cli, tmp_path):
    from scene_files import write_positions

    whole = tmp_path / "pos.ome.tif"
    write_positions(whole)
    cut = tmp_path / "cut.ome.tif"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    code, _, err = ingest(cli, cut, tmp_path / "o.zarr")
    one_line(code, err, tmp_path / "o.zarr", "cut.ome.tif", "damaged TIFF")


def test_pixel_size_overrides_every_instrument_format(cli, tmp_path):
    from zarrmill.io.readers.registry import ReadOptions, reader

    for fmt in ("cellvoyager",) + FORMATS:
        raw = tmp_path / fmt
        generate(cli, raw, fmt)
        acq = reader(fmt).read(raw, ReadOptions(pixel_size_yx=(0.9, 0.8), z_step=3.0, plate_shape=(8, 12)))
        assert (acq.pixel_size_yx, acq.z_step) == ((0.9, 0.8), 3.0), fmt


MALFORMED = {  # a number the instrument metadata carries, made unreadable
    "operetta": ("Index.idx.xml", r'<MainEmissionWavelength Unit="nm">\d+<', '<MainEmissionWavelength Unit="nm">n/a<',
                 "MainEmissionWavelength"),
    "hcsai-size": ("*.jdce", r'"Height": \d+', '"Height": "big"', "Camera.Size.Height"),
    "hcsai-index": ("*.jdce", r'"Index": 0', '"Index": "first"', "Wavelengths.Index"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_number_in_instrument_metadata_is_one_line_naming_file_and_field(cli, tmp_path, case):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    fmt = case.split("-")[0]
    generate(cli, raw, fmt)
    name, pattern, new, field = MALFORMED[case]
    f = next(raw.rglob(name))
    text = f.read_text(encoding="utf-8")
    assert re.search(pattern, text), pattern
    f.write_text(re.sub(pattern, new, text, count=1), encoding="utf-8")
    code, _, err = ingest(cli, raw, out, *(["plate_shape=[8,12]"] if fmt == "hcsai" else []))
    one_line(code, err, out, f.name, field)


def test_an_hcsai_folder_with_two_acquisitions_asks_for_one(cli, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "o.zarr"
    generate(cli, raw / "plate1", "hcsai")
    generate(cli, raw / "plate2", "hcsai")
    code, _, err = ingest(cli, raw, out, "format=hcsai", "plate_shape=[8,12]")
    one_line(code, err, out, "2 HCS.ai acquisitions here", "plate1", "plate2", "give one of them as input")
