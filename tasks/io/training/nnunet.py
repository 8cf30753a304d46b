"""nnU-Net v2 preprocessed configuration folders (``nnUNet_preprocessed/<Dataset>/<plans>_<config>/``),
read as nnU-Net writes them and written so that nnU-Net's own dataset classes read them unchanged.

Per case ``<id>``: data and segmentation as ``<id>.b2nd`` + ``<id>_seg.b2nd`` (nnU-Net 2.5 and
later), ``<id>.npz`` (arrays ``data`` and ``seg``, earlier) or ``<id>.npy`` + ``<id>_seg.npy``
(unpacked), and the properties ``<id>.pkl``. The training patch size comes from the plans file
beside the folder (``<Dataset>/*.json`` whose configuration's ``data_identifier`` is the folder's
name). nnU-Net picks its dataset class from the file endings at the folder's top level
(``infer_dataset_class``: exactly one besides ``pkl`` and ``npy``), so an output folder holds only
case files there; zarrmill's own files go into its ``zarrmill/`` subfolder."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import ConfigError, InputError

NOTE = "layout.md"  # in <output>/zarrmill/: which layout was chosen and why


@dataclass(frozen=True)
class Case:
    identifier: str
    data: Path           # .b2nd, .npy or .npz
    seg: Path | None     # .b2nd or .npy (None: in the .npz, or no segmentation)
    properties: Path     # .pkl


def is_nnunet_folder(path: Path) -> bool:
    """A folder of ``<id>.pkl`` properties each with its data file (.b2nd, .npz or .npy)."""
    path = Path(path)
    if not path.is_dir():
        return False
    pkls = [p for p in path.iterdir() if p.suffix == ".pkl" and p.is_file()]
    return bool(pkls) and all(_data_file(path, p.stem) is not None for p in pkls)


def _data_file(folder: Path, ident: str) -> Path | None:
    for suffix in (".b2nd", ".npy", ".npz"):
        if (folder / f"{ident}{suffix}").is_file():
            return folder / f"{ident}{suffix}"
    return None


def read_cases(folder: Path) -> tuple[list[Case], list[Path]]:
    """(cases in identifier order, other top-level files nnU-Net keeps there, carried unchanged)."""
    folder = Path(folder)
    cases, used = [], set()
    for pkl in sorted(p for p in folder.iterdir() if p.suffix == ".pkl" and p.is_file()):
        data = _data_file(folder, pkl.stem)
        if data is None:
            raise InputError(f"{pkl}: properties without data ({pkl.stem}.b2nd, .npz or .npy); the nnU-Net "
                             "folder is incomplete")
        seg = None
        if data.suffix in (".b2nd", ".npy"):
            seg = folder / f"{pkl.stem}_seg{data.suffix}"
            if not seg.is_file():
                raise InputError(f"{data}: no segmentation {seg.name} beside it; nnU-Net needs both")
        cases.append(Case(pkl.stem, data, seg, pkl))
        used |= {pkl.name, data.name} | ({seg.name} if seg else set())
    kinds = {c.data.suffix for c in cases}
    if len(kinds) > 1:
        raise InputError(f"{folder}: cases stored as {' and '.join(sorted(kinds))} mixed; nnU-Net reads one kind "
                         "per folder")
    others = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in used)
    return cases, others


def open_array(path: Path, member: str = "data") -> tuple[tuple[int, ...], np.dtype, Callable[[tuple[slice, ...]], np.ndarray]]:
    """(shape, dtype, read(slices)) of one nnU-Net array: memory-mapped .b2nd or .npy; an .npz member
    is decompressed whole when read (the format has no other way)."""
    path = Path(path)
    try:
        if path.suffix == ".b2nd":
            import blosc2

            arr = blosc2.open(str(path), mode="r", mmap_mode="r")
            return tuple(arr.shape), np.dtype(arr.dtype), lambda sl: np.asarray(arr[sl])
        if path.suffix == ".npy":
            arr = np.load(path, mmap_mode="r")
            return tuple(arr.shape), arr.dtype, lambda sl: np.asarray(arr[sl])
        with np.load(path) as npz:
            if member not in npz.files:
                raise InputError(f"{path}: no array {member!r} (has {', '.join(npz.files)}); nnU-Net writes data and seg")
            head = npz[member]
        return tuple(head.shape), head.dtype, lambda sl: np.asarray(np.load(path)[member][sl])
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - a damaged file: one line naming it
        raise InputError(f"{path}: not a readable nnU-Net array ({type(err).__name__}: {err})") from None


def own_codec(path: Path) -> tuple[str, int, str] | None:
    """(codec, clevel, filter) nnU-Net wrote a .b2nd file with, in zarrmill's names; None otherwise."""
    if Path(path).suffix != ".b2nd":
        return None
    import blosc2

    cp = blosc2.open(str(path), mode="r").schunk.cparams
    get = (lambda k: cp[k]) if isinstance(cp, dict) else (lambda k: getattr(cp, k))
    filters = [getattr(f, "name", str(f)).lower() for f in get("filters")]
    used = [f for f in filters if f != "nofilter"]
    return getattr(get("codec"), "name", str(get("codec"))).lower(), int(get("clevel")), used[-1] if used else "nofilter"


def plans_patch_size(folder: Path) -> tuple[list[int], Path] | None:
    """The patch size of the configuration this folder holds, from the plans file beside it."""
    folder = Path(folder)
    for plans in sorted(folder.parent.glob("*.json")):
        try:
            doc = json.loads(plans.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        configs = doc.get("configurations") if isinstance(doc, dict) else None
        if not isinstance(configs, dict):
            continue
        for name, conf in configs.items():
            if not isinstance(conf, dict):
                continue
            ident = conf.get("data_identifier") or f"{doc.get('plans_name', plans.stem)}_{name}"
            if ident == folder.name and isinstance(conf.get("patch_size"), list):
                return [int(v) for v in conf["patch_size"]], plans
    return None


def patch_for(input: str | Path, given: list[int] | None) -> list[int]:
    """The training patch: given, or (an nnU-Net folder) the patch size its plans file names."""
    if given:
        return list(given)
    nnunet = is_nnunet_folder(Path(input))
    found = plans_patch_size(Path(input)) if nnunet else None
    if found is None:
        where = (f"no plans file beside it names configuration {Path(input).name!r}" if nnunet
                 else "only an nnU-Net folder brings its own, from its plans file")
        raise ConfigError(f"patch is required ({where}); e.g. --set patch=[128,128,128]")
    return found[0]


def layout_note(choices: dict[str, Any]) -> str:
    """The note written to ``<output>/zarrmill/layout.md``."""
    lines = ["# Layout of this nnU-Net folder (written by zarrmill compress)", "",
             f"Patch size {choices['patch']} ({choices['patch_from']}).", ""]
    for kind in ("data", "seg"):
        c = choices[kind]
        kib = int(np.prod(c["blocks"])) * np.dtype(c["dtype"]).itemsize / 1024
        lines += [f"- {kind} ({c['dtype']}): chunks {c['chunks']}, blocks {c['blocks']} ({kib:g} KiB), "
                  f"{c['codec']}-{c['clevel']} + {c['filter']} ({c['chosen_by']})"]
    lines += ["", "Why: blocks are about a quarter of the patch per axis, so a random patch decodes little "
              "beyond itself, grown to at least 16 KiB where half the patch allows and at most 128 KiB; chunks "
              "cover one patch, so a patch read touches few chunks. Each array is sized for its own dtype "
              "(nnU-Net's rule gives the int8 segmentation the data's shapes). The codec was chosen by trial "
              "on chunks of these cases, per dtype.", "",
              "Point nnU-Net at this folder: copy or link it in place of the original configuration folder "
              "(nnUNet_preprocessed/<Dataset>/<plans>_<configuration>), or set nnUNet_preprocessed to a "
              "tree that holds it. Properties (.pkl) and other files are carried unchanged."]
    return "\n".join(lines) + "\n"
