"""A small nnU-Net v2 preprocessed folder (``<root>/Dataset001_Test/nnUNetPlans_<config>/`` with
the plans file ``nnUNetPlans.json`` beside it), for ``zarrmill sample-data`` and the tests.

Each case is two channels (a CT-like smooth float32 one, as after nnU-Net's normalisation, and a
quantised microscopy-like one), a segmentation (-1, 0, 1 in int8) and its properties (``.pkl``).
By default the cases are written as nnU-Net 2.5 and later writes them (``save_case``): ``<case>.b2nd``
and ``<case>_seg.b2nd``, LZ4HC level 5, chunks and blocks by nnU-Net's own rule for the patch size
(``b2layout.nnunet_layout``), and ``<case>.pkl``; tests/test_nnunet.py passes nnU-Net's own
``save_case`` instead, and tests/test_sample_data.py reads this writer's folder with nnU-Net's
``nnUNetDatasetBlosc2``."""
from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

DATASET = "Dataset001_Test"
# save(data, seg, properties, target without suffix, patch)
SaveCase = Callable[[np.ndarray, np.ndarray, dict, str, Sequence[int]], None]


def volume(shape: Sequence[int], seed: int, kind: str) -> np.ndarray:
    """float32: ``ct`` smooth with a little noise; otherwise quantised microscopy-like counts."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, s, dtype=np.float32) for s in shape], indexing="ij")
    smooth = np.sin(3 * z + seed) * np.cos(4 * y) + x * x
    if kind == "ct":  # CT-like: smooth float32 after nnU-Net's normalisation
        return (smooth + 0.05 * rng.standard_normal(shape)).astype(np.float32)
    return np.round(20 * smooth + rng.poisson(3, shape)).astype(np.float32)  # quantised microscopy


def case_shape(config: str, i: int) -> tuple[int, int, int]:
    return (30 + 4 * i, 64, 56) if config == "3d_fullres" else (6 + i, 72, 64)


def save_case(data: np.ndarray, seg: np.ndarray, properties: dict, target: str, patch: Sequence[int]) -> None:
    """What nnU-Net's ``nnUNetDatasetBlosc2.save_case`` writes, with zarrmill's own b2nd writer
    (every slab read back and compared; a file appears under its name only when complete)."""
    from ..training.b2layout import nnunet_layout
    from ..training.b2store import cparams, write_b2nd

    chunks, blocks = nnunet_layout(data.shape, data.itemsize, patch)  # nnU-Net gives seg the data's layout
    for arr, suffix in ((data, ".b2nd"), (seg, "_seg.b2nd")):
        params = cparams("lz4hc", 5, "shuffle" if arr.itemsize > 1 else "nofilter", arr.itemsize)
        write_b2nd(Path(target + suffix), arr.shape, arr.dtype, lambda sl, a=arr: a[sl], chunks, blocks, params)
    with open(target + ".pkl", "xb") as f:
        pickle.dump(properties, f)


def write_preprocessed(root: Path, config: str = "3d_fullres", patch: Sequence[int] = (16, 32, 32), n: int = 3,
                       save: SaveCase = save_case) -> Path:
    """``<root>/Dataset001_Test/nnUNetPlans_<config>/`` with ``n`` cases; returns that folder. The
    plans file names the configuration's patch size (what compress and tune read)."""
    dataset = Path(root) / DATASET
    folder = dataset / f"nnUNetPlans_{config}"
    folder.mkdir(parents=True)
    plans = dataset / "nnUNetPlans.json"
    doc = json.loads(plans.read_text()) if plans.exists() else {"plans_name": "nnUNetPlans", "configurations": {}}
    doc["configurations"][config] = {"data_identifier": f"nnUNetPlans_{config}", "patch_size": list(patch)}
    plans.write_text(json.dumps(doc))
    # dataset.json as nnU-Net's raw dataset declares it (nnUNetv2_train reads it from this folder)
    (dataset / "dataset.json").write_text(json.dumps({
        "channel_names": {"0": "CT", "1": "microscopy"}, "labels": {"background": 0, "cell": 1},
        "numTraining": n, "file_ending": ".nii.gz"}, indent=2))
    for i in range(n):
        shape = case_shape(config, i)
        data = np.stack([volume(shape, i, "ct"), volume(shape, i + 10, "microscopy")])
        seg = (data[:1] > 0.6).astype(np.int8) - (data[:1] < -0.8).astype(np.int8)
        props = {"spacing": [1.0, 0.7, 0.7], "shape_before_cropping": list(shape), "case": i,
                 "class_locations": {1: np.argwhere(seg[0] == 1)[:5]}}
        save(data, seg, props, str(folder / f"case_{i:03d}"), list(patch))
    return folder
