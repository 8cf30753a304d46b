"""``zarrmill sample-data NAME DEST``: a small sample for each job zarrmill does, made in seconds on
this machine (nothing is downloaded), so that every getting-started page runs as pasted.
``zarrmill sample-data`` lists them.

- ``plate-<format>``: an instrument folder of each format ``generate-plate`` writes (CellVoyager,
  CQ3000, MetaXpress, its .HTD export, HCS.ai, Operetta / Opera Phenix, scanR), through a
  ``generate-plate`` run (the output guard, a ledger beside it, resumable);
- ``organ-points``: an OME-Zarr volume (a ``generate`` run), a cellfinder XML of a point at each
  blob the volume was rendered with (``Blobs.make``, the generator's own blobs) and a segmentation of
  those blobs (``segmentation.npy``, what the ``labels`` task takes);
- ``training-cases``: ``.npy`` training volumes rendered by the same blob generator;
- ``nnunet-preprocessed``: an nnU-Net v2 preprocessed tree as nnU-Net writes it (io/synthetic/nnunet.py).

DEST must be new or an empty folder: anything else is refused before a byte is written, so a
second call never touches what the first wrote."""
from __future__ import annotations

import argparse
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import ConfigError, OutputExistsError, did_you_mean

# every plate sample: the plate the manual's screening examples take (channel_names: [DAPI, GFP])
PLATE = {"wells": ["B03", "C05"], "grid": [2, 2], "shape": [64, 80], "channels": 2, "z_planes": 2}
PLATE_FORMATS = {
    "cellvoyager": "Yokogawa CellVoyager CV7000/CV8000 measurement (MeasurementData.mlf)",
    "cq": "Yokogawa CQ3000 measurement",
    "metaxpress": "MetaXpress folder as acquired (no .HTD)",
    "imagexpress": "MetaXpress plate export with its .HTD",
    "hcsai": "ImageXpress HCS.ai acquisition",
    "operetta": "Operetta / Opera Phenix Harmony export (Index.xml)",
    "scanr": "Olympus/Evident scanR acquisition",
}
VOLUME = {"shape": [24, 96, 96], "chunks": [8, 32, 32], "pixel_size": [2, 1, 1], "n_blobs": 200, "blob_radius": 6.0,
          "seed": 0}
CASES = {"n": 3, "shape": (40, 64, 64), "n_blobs": 40, "blob_radius": 4.0}
NNUNET_PATCH = [16, 32, 32]


@dataclass(frozen=True)
class Sample:
    name: str
    what: str  # one line
    pixel_bytes: int  # uncompressed, what the listing shows
    make: Callable[[Path], None]
    next: str  # a command to try on it; {dest} is DEST

    @property
    def megabytes(self) -> float:
        return self.pixel_bytes / 1e6


def _plate(fmt: str) -> Callable[[Path], None]:
    def make(dest: Path) -> None:
        from .commands import run_single_task

        run_single_task("generate-plate", {"output": str(dest), "format": fmt, **PLATE}, "sync", False)
    return make


def _organ(dest: Path) -> None:
    """brain.ome.zarr (a ``generate`` run); cells.xml: a point in the voxel of each blob's centre,
    type 2 (cell) for the bright blobs and 1 (not a cell) for the dim ones, as cellfinder labels them;
    segmentation.npy: each blob's voxels numbered 1, 2, ... (uint16, z, y, x), 0 between them."""
    import numpy as np

    from ...io.readers.points import write_cellfinder_xml
    from ...io.synthetic.blobs import Blobs, render
    from .commands import run_single_task

    run_single_task("generate", {"output": str(dest / "brain.ome.zarr"), **VOLUME}, "sync", False)
    blobs = Blobs.make(tuple(VOLUME["shape"]), VOLUME["n_blobs"], VOLUME["blob_radius"], VOLUME["seed"])
    labels = np.where(blobs.amplitudes >= 600, 2, 1)
    _new_file(dest / "cells.xml", lambda f: write_cellfinder_xml(f, np.floor(blobs.centres), labels))
    mask = render(blobs, tuple((0, s) for s in VOLUME["shape"]), True, None).astype(np.uint16)
    _new_file(dest / "segmentation.npy", lambda f: np.save(f, mask))


def _cases(dest: Path) -> None:
    """case_000.npy ...: blobs on a noisy background, uint16, one seed each."""
    import numpy as np

    from ...io.synthetic.blobs import Blobs, render, to_dtype

    dest.mkdir(parents=True, exist_ok=True)
    shape = CASES["shape"]
    for i in range(CASES["n"]):
        blobs = Blobs.make(shape, CASES["n_blobs"], CASES["blob_radius"], seed=i)
        pixels = to_dtype(render(blobs, tuple((0, s) for s in shape), False, noise_seed=1000 + i), np.dtype("uint16"))
        _new_file(dest / f"case_{i:03d}.npy", lambda f, a=pixels: np.save(f, a))


def _nnunet(dest: Path) -> None:
    from ...io.synthetic.nnunet import write_preprocessed

    dest.mkdir(parents=True, exist_ok=True)
    write_preprocessed(dest, "3d_fullres", NNUNET_PATCH)


def _new_file(path: Path, write: Callable) -> None:
    """Write a file that must not exist yet (DEST was new or empty)."""
    with open(path, "xb") as f:
        write(f)


def _plate_bytes() -> int:
    fields = len(PLATE["wells"]) * PLATE["grid"][0] * PLATE["grid"][1]
    return fields * PLATE["channels"] * PLATE["z_planes"] * PLATE["shape"][0] * PLATE["shape"][1] * 2


def _nnunet_bytes() -> int:
    from ...io.synthetic.nnunet import case_shape

    return sum(math.prod(case_shape("3d_fullres", i)) * (2 * 4 + 1) for i in range(3))  # 2 x float32 + int8 seg


def samples() -> dict[str, Sample]:
    plate = (f"{len(PLATE['wells'])} wells x {PLATE['grid'][0]}x{PLATE['grid'][1]} fields of "
             f"{PLATE['shape'][0]}x{PLATE['shape'][1]}, {PLATE['channels']} channels, {PLATE['z_planes']} z-planes")
    out = [Sample(f"plate-{fmt}", f"screening: {what}, {plate}", _plate_bytes(), _plate(fmt),
                  "zarrmill task ingest --set input={dest} --set output=plate.ome.zarr --set layout=well "
                  "--set min_size=32")
           for fmt, what in PLATE_FORMATS.items()]
    z, y, x = VOLUME["shape"]
    out.append(Sample("organ-points", f"whole organ: an OME-Zarr volume (brain.ome.zarr, {z}x{y}x{x} uint16, "
                      f"{VOLUME['pixel_size'][0]}x{VOLUME['pixel_size'][1]}x{VOLUME['pixel_size'][2]} um) and "
                      f"{VOLUME['n_blobs']} cellfinder XML points in it (cells.xml), their segmentation (segmentation.npy)",
                      z * y * x * 4, _organ,
                      "zarrmill task patch-extract --set input={dest}/brain.ome.zarr --set points={dest}/cells.xml "
                      "--set output=cuboids.zarr --set cuboid=[8,16,16] --set edge=drop"))
    shape = "x".join(map(str, CASES["shape"]))
    out.append(Sample("training-cases", f"deep learning: {CASES['n']} training volumes as .npy ({shape} uint16)",
                      CASES["n"] * math.prod(CASES["shape"]) * 2, _cases,
                      "zarrmill tune {dest} --patch 32,48,48 --output tune --seconds 1"))
    out.append(Sample("nnunet-preprocessed", "deep learning: nnU-Net v2's preprocessed folder (Dataset001_Test, "
                      "3 cases of 2 channels + segmentation, 3d_fullres, patch "
                      f"{','.join(map(str, NNUNET_PATCH))}, as nnU-Net writes it)", _nnunet_bytes(), _nnunet,
                      "zarrmill task compress --set input={dest}/Dataset001_Test/nnUNetPlans_3d_fullres "
                      "--set output=pre/Dataset001_Test/nnUNetPlans_3d_fullres"))
    return {s.name: s for s in out}


def find(name: str) -> Sample:
    known = samples()
    if name not in known:
        part = [k for k in known if name.lower() in k]  # 'organ' -> organ-points, 'cq' -> plate-cq
        hint = f"did you mean {part[0]!r}?" if len(part) == 1 else did_you_mean(name, known)
        raise ConfigError(f"unknown sample {name!r}{'; ' + hint if hint else ''} (zarrmill sample-data lists "
                          f"all {len(known)})")
    return known[name]


def check_dest(dest: str) -> Path:
    """DEST as a local path that is new or an empty folder; anything else is one line, exit 2."""
    if "://" in dest:
        raise ConfigError(f"{dest}: sample-data writes to a local folder; copy the sample to a bucket with a task "
                          "afterwards")
    path = Path(dest)
    if path.is_symlink() and not path.exists():
        raise OutputExistsError(f"{dest}: a broken symlink; give a new or empty folder")
    if path.exists():
        if not path.is_dir():
            raise OutputExistsError(f"{dest}: exists and is a file; give a new or empty folder")
        if any(path.iterdir()):
            raise OutputExistsError(f"{dest}: exists and is not empty; sample-data writes only into a new or "
                                    "empty folder (nothing was changed)")
    return path


def listing() -> list[str]:
    rows = [f"{s.name:21s} {s.megabytes:4.1f} MB  {s.what}" for s in samples().values()]
    return rows + ["write one: zarrmill sample-data NAME DEST (DEST: a new or empty folder; sizes are the pixels, "
                   "uncompressed)"]


def cmd_sample_data(args: argparse.Namespace) -> int:
    if args.name is None:
        for line in listing():
            print(line)
        return 0
    sample = find(args.name)
    if args.dest is None:
        raise ConfigError(f"zarrmill sample-data {args.name} DEST: give the folder to write it to (new or empty)")
    dest = check_dest(args.dest)
    sample.make(dest)
    print(f"{args.dest}: {sample.name} written ({sample.what})")
    print("try: " + sample.next.format(dest=shlex.quote(str(args.dest))))
    return 0
