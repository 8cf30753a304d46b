"""The reader matrix: every output kind opens in the readers users have (ome-zarr-py's Reader,
`ome_zarr info`, napari-ome-zarr's reader function, ngio, bioio-ome-zarr, ome-zarr-models; zarr,
dask and blosc2 for the training stores), with pixels equal to the source arrays the test wrote.
Built once per module from small generated inputs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

RNG = np.random.default_rng(42)
VOLUME = RNG.integers(0, 4000, size=(2, 12, 40, 56), dtype=np.uint16)  # c, z, y, x
FOV = (24, 32)  # y, x of each field; 2 fields side by side per well, no overlap
PIXEL = 0.5
FIELDS = {(well, f): RNG.integers(0, 60000, size=FOV, dtype=np.uint16) for well in ("A01", "B02") for f in (1, 2)}


def _task(task: str, *sets: str) -> None:
    from zarrmill.runtime.front.cli import main

    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0, args


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("readers")
    np.save(root / "volume.npy", VOLUME)
    out = {}
    for version in ("0.5", "0.4"):
        image = out[f"image-{version}"] = root / f"image{version}.zarr"
        _task("ingest", f"input={root / 'volume.npy'}", f"output={image}", "axes=czyx",
              "pixel_size=[1.0,0.5,0.5]", f"ngff_version={version}")
        _task("pyramid", f"input={image}", "min_size=8")
    raw = root / "raw"
    raw.mkdir()
    rows = ["well,field,x,y"]
    for (well, f), arr in FIELDS.items():
        tifffile.imwrite(raw / f"{well}_s{f}.tif", arr)
        rows.append(f"{well},{f},{(f - 1) * FOV[1] * PIXEL},0")
    (raw / "pos.csv").write_text("\n".join(rows) + "\n")
    plate = out["plate"] = root / "plate.zarr"
    _task("ingest", f"input={raw}", f"output={plate}", "pattern={well}_s{field}.tif",
          f"positions={raw / 'pos.csv'}", f"pixel_size=[{PIXEL},{PIXEL}]")
    _task("pyramid", f"input={plate}", "min_size=8")
    _task("reshard", f"input={plate}", "overview=true", "overview_size=16", "min_size=8")
    out["wells"] = root / "plate-wells.zarr"
    out["overview"] = out["wells"] / "overview"
    out["labelled"] = _labelled_image(root)
    out["compressed"] = root / "volume-compressed.zarr"
    _task("compress", f"input={root / 'volume.npy'}", f"output={out['compressed']}", "format=zarr",
          "patch=[8,16,16]")
    out["b2nd"] = root / "volume-b2nd"
    _task("compress", f"input={root / 'volume.npy'}", f"output={out['b2nd']}", "patch=[8,16,16]")
    return out


def _labelled_image(root: Path) -> Path:
    """An image with a label image in ``labels/cells`` (as segmentation tools add them), copied by
    rechunk: the copy's labels are what the readers must find."""
    import shutil

    source = root / "labelled-source.zarr"
    _task("generate", f"output={source}", "shape=[8,32,32]", "n_blobs=5")
    _task("generate", f"output={root / 'cells.zarr'}", "shape=[8,32,32]", "n_blobs=5", "kind=labels")
    labels = zarr.open_group(str(source / "labels"), mode="w", zarr_format=3)
    labels.attrs["ome"] = {"version": "0.5", "labels": ["cells"]}
    shutil.copytree(root / "cells.zarr", source / "labels" / "cells", ignore=shutil.ignore_patterns(".zarrmill"))
    copy = root / "labelled.zarr"
    _task("rechunk", f"input={source}", f"output={copy}", "chunks=[4,16,16]")
    return copy


def cells(outputs: dict[str, Path]) -> np.ndarray:
    return np.asarray(zarr.open_array(str(outputs["labelled"].parent / "cells.zarr" / "0"), mode="r"))


# -- what each store must show -----------------------------------------------------------------------
def _well(well: str) -> np.ndarray:
    return np.concatenate([FIELDS[(well, 1)], FIELDS[(well, 2)]], axis=1)


def expected_images(outputs: dict[str, Path]) -> list[tuple[Path, np.ndarray]]:
    """(image path, its level-0 pixels as the source has them) for every image kind."""
    images = [(outputs["image-0.5"], VOLUME), (outputs["image-0.4"], VOLUME)]
    for (well, f), arr in FIELDS.items():
        images.append((outputs["plate"] / well[0] / well[1:] / str(f - 1), arr))
    for well in ("A01", "B02"):
        images.append((outputs["wells"] / well[0] / well[1:] / "well", _well(well)))
    return images


def overview_expected(outputs: dict[str, Path]) -> np.ndarray:
    attrs = zarr.open_group(str(outputs["overview"]), mode="r").attrs.asdict()
    info = attrs["zarrmill"]["overview"]
    canvas = np.zeros(zarr.open_array(str(outputs["overview"] / "0"), mode="r").shape, np.uint16)
    for well, box in info["wells"].items():
        src = np.asarray(zarr.open_array(str(outputs["wells"] / well / "well" / info["source_level"]), mode="r"))
        canvas[..., box["y"]:box["y"] + box["height"], box["x"]:box["x"] + box["width"]] = src
    return canvas


# -- the readers ---------------------------------------------------------------------------------------
def read_ome_zarr(path: Path) -> np.ndarray:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    nodes = list(Reader(parse_url(str(path)))())  # from a label image it also climbs to its parent image
    node = next((n for n in nodes if str(n).split(" [")[0].rstrip("/") == str(path)), nodes[0])
    return np.asarray(node.data[0])


def read_napari(path: Path) -> np.ndarray:
    from napari_ome_zarr import napari_get_reader

    reader = napari_get_reader(str(path))
    assert reader is not None, f"napari-ome-zarr does not claim {path}"
    wanted = "labels" if "image-label" in zarr.open_group(str(path), mode="r").attrs.get("ome", {}) else "image"
    layers = [data for data, _, kind in reader(str(path)) if kind == wanted]  # a label image comes with its image
    assert layers, f"napari-ome-zarr has no {wanted} layer for {path}"
    level0 = [np.asarray(data[0] if isinstance(data, list) else data) for data in layers]
    # some releases hand over one layer per channel (what the viewer shows), others one layer with
    # channel_axis set: both are the same pixels
    return level0[0] if len(level0) == 1 or wanted == "labels" else np.stack(level0)


def read_ngio(path: Path) -> np.ndarray:
    from ngio import open_ome_zarr_container

    return np.asarray(open_ome_zarr_container(str(path)).get_image().get_as_numpy())


def read_bioio(path: Path) -> np.ndarray:
    from bioio_ome_zarr import Reader

    return np.asarray(Reader(str(path)).data)


MODELS_SCRIPT = """
import json, sys, zarr
from ome_zarr_models import open_ome_zarr
from ome_zarr_models.v04.image import Image as I4
from ome_zarr_models.v04.image_label import ImageLabel as L4
model = open_ome_zarr(zarr.open_group(sys.argv[1], mode="r"))
attrs = model.attributes if isinstance(model, (I4, L4)) else getattr(model, "ome_attributes", None)
path = attrs.multiscales[0].datasets[0].path if hasattr(attrs, "multiscales") else None
print(json.dumps([type(model).__name__, path]))
"""


def read_ome_zarr_models(path: Path) -> np.ndarray:
    """In a fresh process: once ngio has opened a zarr v2 image with AnnData tables, ome-zarr-models
    in the same process rejects v2 arrays it otherwise accepts (a clash of the two libraries)."""
    import json

    proc = subprocess.run([sys.executable, "-c", MODELS_SCRIPT, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kind, first = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kind in ("Image", "ImageLabel"), kind
    return np.asarray(zarr.open_group(str(path), mode="r")[first])


READERS = {"ome-zarr-py": read_ome_zarr, "napari-ome-zarr": read_napari, "ngio": read_ngio,
           "bioio-ome-zarr": read_bioio, "ome-zarr-models": read_ome_zarr_models}


@pytest.mark.parametrize("reader", READERS)
def test_every_image_kind_opens_in_every_reader_with_the_source_pixels(outputs, reader):
    for path, expected in expected_images(outputs) + [(outputs["overview"], overview_expected(outputs))]:
        got = READERS[reader](path)
        np.testing.assert_array_equal(np.squeeze(got), np.squeeze(expected), err_msg=f"{reader}: {path}")


def test_ome_zarr_info_lists_every_output(outputs):
    for kind in ("image-0.5", "image-0.4", "plate", "wells", "overview"):
        proc = subprocess.run([str(Path(sys.executable).with_name("ome_zarr")), "info", str(outputs[kind])],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "data" in proc.stdout and "Failed" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["plate", "wells"])
def test_plates_tile_in_ome_zarr_py_and_napari_and_list_in_ngio_and_ome_zarr_models(outputs, kind):
    """Plate readers tile each well's first image by row and column of the 96-well plate (8 x 12):
    well A01 is at the top left, B02 one row down and one column right, the rest is empty."""
    from ngio import open_ome_zarr_plate
    from ome_zarr_models import open_ome_zarr
    from ome_zarr_models.v05.hcs import HCS

    first = {w: (FIELDS[(w, 1)] if kind == "plate" else _well(w)) for w in ("A01", "B02")}
    h, w = first["A01"].shape
    for reader in (read_ome_zarr, read_napari):
        tiled = np.squeeze(reader(outputs[kind]))
        assert tiled.shape == (8 * h, 12 * w), (reader.__name__, tiled.shape)
        np.testing.assert_array_equal(tiled[:h, :w], first["A01"])
        np.testing.assert_array_equal(tiled[h:2 * h, w:2 * w], first["B02"])
        tiled[:h, :w] = 0
        tiled[h:2 * h, w:2 * w] = 0
        assert not tiled.any()
    plate = open_ome_zarr_plate(str(outputs[kind]))
    images = plate.get_images()
    assert len(images) == (4 if kind == "plate" else 2)
    assert isinstance(open_ome_zarr(zarr.open_group(str(outputs[kind]), mode="r")), HCS)


def test_resharded_wells_list_one_image_and_their_fov_tables_read_in_ngio(outputs):
    from ngio import open_ome_zarr_container

    for well in ("A01", "B02"):
        group = zarr.open_group(str(outputs["wells"] / well[0] / well[1:]), mode="r")
        assert [im["path"] for im in group.attrs["ome"]["well"]["images"]] == ["well"]
        container = open_ome_zarr_container(str(outputs["wells"] / well[0] / well[1:] / "well"))
        table = container.get_table("FOV_ROI_table")
        for f in (1, 2):
            roi = table.get(f"FOV_{f}")
            np.testing.assert_array_equal(np.squeeze(container.get_image().get_roi(roi)), FIELDS[(well, f)])
        whole = container.get_table("well_ROI_table").get("well_1")
        np.testing.assert_array_equal(np.squeeze(container.get_image().get_roi(whole)), _well(well))
        # the AnnData layout Fractal's tasks read: a roi_table with the micrometer columns in X
        import anndata

        fovs = anndata.io.read_elem(zarr.open_group(str(outputs["wells"] / well[0] / well[1:] / "well" / "tables"
                                                        / "FOV_ROI_table"), mode="r"))
        assert list(fovs.obs_names) == ["FOV_1", "FOV_2"]
        assert {"x_micrometer", "y_micrometer", "len_x_micrometer", "len_y_micrometer"} <= set(fovs.var_names)
        attrs = zarr.open_group(str(outputs["wells"] / well[0] / well[1:] / "well" / "tables" / "FOV_ROI_table"),
                                mode="r").attrs
        assert attrs["type"] == "roi_table" and attrs["fractal_table_version"] == "1"


def test_training_stores_open_in_zarr_dask_and_blosc2(outputs):
    import blosc2
    import dask.array as da

    arrays = [p for p in outputs["compressed"].rglob("zarr.json")
              if zarr.open(str(p.parent), mode="r").__class__.__name__ == "Array"]
    assert arrays, "compress wrote no zarr array"
    for meta in arrays:
        np.testing.assert_array_equal(np.asarray(zarr.open_array(str(meta.parent), mode="r")), VOLUME)
        np.testing.assert_array_equal(da.from_zarr(str(meta.parent)).compute(), VOLUME)
    files = sorted(outputs["b2nd"].glob("*.b2nd"))
    assert len(files) == 1
    np.testing.assert_array_equal(blosc2.open(str(files[0]), mode="r")[:], VOLUME)


def test_label_images_are_kept_and_open_as_labels(outputs):
    from ngio import open_ome_zarr_container
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    expected = cells(outputs)
    assert expected.any() and np.issubdtype(expected.dtype, np.integer)
    label_path = outputs["labelled"] / "labels" / "cells"
    for name, reader in READERS.items():  # the label image on its own
        np.testing.assert_array_equal(reader(label_path), expected, err_msg=name)
    nodes = list(Reader(parse_url(str(outputs["labelled"])))())  # found from the image, as viewers do
    assert any(str(label_path) in str(n) for n in nodes), nodes
    from napari_ome_zarr import napari_get_reader

    layers = napari_get_reader(str(outputs["labelled"]))(str(outputs["labelled"]))
    labels = [data for data, _, kind in layers if kind == "labels"]
    assert len(labels) == 1
    np.testing.assert_array_equal(np.asarray(labels[0][0] if isinstance(labels[0], list) else labels[0]), expected)
    container = open_ome_zarr_container(str(outputs["labelled"]))
    assert container.list_labels() == ["cells"]
    np.testing.assert_array_equal(container.get_label("cells").get_as_numpy(), expected)
