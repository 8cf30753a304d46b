"""ImageXpress / MetaXpress plate folders, generated as MetaXpress writes them (an .HTD plate
file, TimePoint_N/ZStep_N folders, UUIDs in file names, thumbnails, z projections, MetaMorph
tags written with tifffile): ingest gives the wells, sites, channels, z, t, pixel size and stage
positions the instrument's metadata says."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import tifffile
import zarr
from ngff_official import validate_store

from zarrmill.io.ngff.conformance import check_store

PIXEL = 0.65
SITES = {1: (1000.0, 2000.0), 2: (1000.0 + 40 * PIXEL, 2000.0)}  # site -> stage x, y (um): side by side
WELLS = ("B03", "C05")
WAVES = {1: "DAPI", 2: "FITC"}
Z_UM = {1: 5000.0, 2: 5002.5, 3: 5005.0}


def pixels(well: str, site: int, wave: int, z: int, t: int) -> np.ndarray:
    # a fixed seed per plane (hash() of a string changes with every interpreter run)
    seed = [ord(c) for c in well] + [site, wave, z, t]
    return np.random.default_rng(seed).integers(0, 4000, (24, 40), dtype=np.uint16)


def metaseries(x: float, y: float, z: float, wave: int) -> str:
    props = {"spatial-calibration-x": ("float", PIXEL), "spatial-calibration-y": ("float", PIXEL),
             "spatial-calibration-units": ("string", "um"), "stage-position-x": ("float", x),
             "stage-position-y": ("float", y), "z-position": ("float", z), "_IllumSetting_": ("string", WAVES[wave])}
    body = "".join(f'<prop id="{k}" type="{t}" value="{v}"/>' for k, (t, v) in props.items())
    return f"<MetaData><PlaneInfo>{body}</PlaneInfo><SetInfo></SetInfo></MetaData>"


def imagexpress_folder(root: Path, timepoints: int = 2, htd_names: bool = True) -> Path:
    plate = root / "Experiment1" / "2024-05-01" / "1234"  # MetaXpress nests the plate folder
    waves = "".join(f'"WaveName{w}", "{n}"\n' for w, n in WAVES.items()) if htd_names else ""
    plate.mkdir(parents=True)
    (plate / "MyPlate.HTD").write_text(
        '"HTSInfoFile", Version 1.0\n"Description", "zarrmill test plate"\n"TimePoints", 2\n"ZSeries", TRUE\n'
        '"XWells", 12\n"YWells", 8\n"XSites", 2\n"YSites", 1\n"Waves", TRUE\n"NWavelengths", 2\n'
        + waves + '"EndFile"\n', encoding="latin-1")
    for t in range(1, timepoints + 1):
        for well in WELLS:
            for site, (x, y) in SITES.items():
                for wave in WAVES:
                    stem = f"MyPlate_{well}_s{site}_w{wave}"
                    for z in Z_UM:
                        folder = plate / f"TimePoint_{t}" / f"ZStep_{z}"
                        folder.mkdir(parents=True, exist_ok=True)
                        tifffile.imwrite(folder / f"{stem}{str(uuid.uuid4()).upper()}.tif", pixels(well, site, wave, z, t),
                                         description=metaseries(x, y, Z_UM[z], wave), software="MetaSeries",
                                         metadata=None)
                    projection = np.max([pixels(well, site, wave, z, t) for z in Z_UM], axis=0)
                    tifffile.imwrite(plate / f"TimePoint_{t}" / f"{stem}{str(uuid.uuid4()).upper()}.tif", projection,
                                     description=metaseries(x, y, 0.0, wave), software="MetaSeries", metadata=None)
                    tifffile.imwrite(plate / f"TimePoint_{t}" / f"{stem}_thumb{str(uuid.uuid4()).upper()}.tif",
                                     projection[::4, ::4])
    return root


def test_an_imagexpress_plate_ingests_with_its_metadata(cli, tmp_path):
    raw = imagexpress_folder(tmp_path / "raw")
    out = tmp_path / "plate.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}")
    assert code == 0, err
    validate_store(out)
    assert check_store(out)[0] == []
    plate = json.loads((out / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    assert [w["path"] for w in plate["wells"]] == ["B/03", "C/05"] and len(plate["columns"]) == 12
    for well in WELLS:
        for site in SITES:
            image = out / well[0] / well[1:] / str(site - 1)
            data = zarr.open_array(str(image / "0"))[:]
            assert data.shape == (2, 2, 3, 24, 40)  # t, c, z, y, x: projections and thumbnails left out
            for t in (1, 2):
                for wave in WAVES:
                    for z in Z_UM:
                        np.testing.assert_array_equal(data[t - 1, wave - 1, z - 1], pixels(well, site, wave, z, t))
            ms = json.loads((image / "zarr.json").read_text())["attributes"]["ome"]
            cts = ms["multiscales"][0]["datasets"][0]["coordinateTransformations"]
            assert cts[0]["scale"][-3:] == [2.5, PIXEL, PIXEL]
            translation = cts[1]["translation"] if len(cts) > 1 else [0.0] * 5
            assert translation[-1] == round(SITES[site][0] - SITES[1][0], 6)  # relative to the well
            assert [c["label"] for c in ms["omero"]["channels"]] == ["DAPI", "FITC"]


def test_channel_names_come_from_the_tags_without_htd_names_and_reshard_places_sites(cli, tmp_path):
    raw = imagexpress_folder(tmp_path / "raw", timepoints=1, htd_names=False)
    out = tmp_path / "plate.zarr"
    assert cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}")[0] == 0
    ms = json.loads((out / "B" / "03" / "0" / "zarr.json").read_text())["attributes"]["ome"]
    assert [c["label"] for c in ms["omero"]["channels"]] == ["DAPI", "FITC"]
    assert cli("task", "reshard", "--executor", "sync", "--set", f"input={out}", "--set", "min_size=8")[0] == 0
    well = zarr.open_array(str(tmp_path / "plate-wells.zarr" / "B" / "03" / "well" / "0"))[:]
    assert well.shape[-2:] == (24, 80)  # two sites side by side by their stage positions
    np.testing.assert_array_equal(well[0, 0, :, 40:], pixels("B03", 2, 1, 1, 1))  # c, z, y, x


def test_two_htd_files_and_a_duplicate_plane_are_one_line(cli, tmp_path):
    raw = imagexpress_folder(tmp_path / "raw", timepoints=1)
    plate = next(raw.rglob("*.HTD")).parent
    dup = next((plate / "TimePoint_1" / "ZStep_1").glob("MyPlate_B03_s1_w1*.tif"))
    (dup.parent / ("MyPlate_B03_s1_w1" + str(uuid.uuid4()).upper() + ".tif")).write_bytes(dup.read_bytes())
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}",
                       "--set", f"output={tmp_path / 'p.zarr'}")
    assert code == 2 and "are both well B03, field 1, time point 1, channel 1, z 1: one plane, two files" in err, err
    (plate.parent / "Other.HTD").write_text('"XWells", 12\n"YWells", 8\n')
    (plate / "Copy.HTD").write_text('"XWells", 12\n"YWells", 8\n')
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={plate}",
                       "--set", f"output={tmp_path / 'q.zarr'}")
    assert code == 2 and "2 .HTD plate files" in err and len(err.strip().splitlines()) == 1, err


def test_projections_on_request_are_their_own_plate_of_2d_images(cli, tmp_path):
    raw = imagexpress_folder(tmp_path / "raw")
    out = tmp_path / "projections.zarr"
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}",
                       "--set", "projections=only")
    assert code == 0, err
    validate_store(out)
    assert check_store(out)[0] == []
    for well in WELLS:
        for site in SITES:
            data = zarr.open_array(str(out / well[0] / well[1:] / str(site - 1) / "0"))[:]
            assert data.shape == (2, 2, 1, 24, 40)  # t, c, z (one: the projection), y, x
            for t in (1, 2):
                for wave in WAVES:
                    expected = np.max([pixels(well, site, wave, z, t) for z in Z_UM], axis=0)
                    np.testing.assert_array_equal(data[t - 1, wave - 1, 0], expected)
    # a plate without projections, and projections asked of another format: one line each
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={tmp_path / 'cv'}",
                       "--set", "wells=[B03]", "--set", "grid=[1,1]", "--set", "shape=[16,16]")
    assert code == 0, err
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={tmp_path / 'cv'}",
                       "--set", f"output={tmp_path / 'x.zarr'}", "--set", "projections=only")
    assert code == 2 and "projections is for cq/imagexpress/metaxpress/hcsai; this input is cellvoyager" in err and len(err.strip().splitlines()) == 1
    for f in raw.rglob("*.tif"):
        if f.parent.name.startswith("TimePoint_") and "_thumb" not in f.name:
            f.unlink()  # the projections
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set",
                       f"output={tmp_path / 'none.zarr'}", "--set", "projections=only")
    assert code == 2 and "no z projections" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none.zarr").exists()
