"""Compress arrays for fast random patch reads: Blosc2 ``.b2nd`` files (one per case, read with
``blosc2.open(path, mmap_mode="r")`` or ``zarrmill.io.training.b2store.open_patches``) or a zarr v3 store with
Blosc codecs that stock zarr-python and ome-zarr-py read (one OME-Zarr image per case,
``<output>/<case>/0``).

Inputs: a .npy / TIFF file, a folder of them (one case per file, as nnU-Net keeps them), a zarr
array or an OME-Zarr image (``level``). Axes stay as the input has them (channels first); the last
``len(patch)`` axes are spatial. Chunk and block shapes come from the training patch size: a
block is, per spatial axis, the power of two nearest patch/4, doubled along the axis with the most
room while it holds under 16 KiB and stays within patch/2 (never above 128 KiB); a chunk is whole
blocks covering about one patch per axis, at most 4 MiB; channels are 1 in both (a 128^3 uint16
patch gets 32^3 blocks in 128^3 chunks). ``layout: nnunet`` (nnU-Net v2.8's rule) or ``blosc2``
(its defaults) select the baselines; ``chunks``/``blocks`` override. With ``codec: auto`` the
codec, level and filter are chosen by trial on sampled chunks under ``policy`` and recorded in
each output; with ``min_ratio`` the trial also tries block shapes beside the rule's and takes,
among candidates of at least that ratio, the fastest patch read (decode speed / over-read).
Lossless: every slab written is read back and compared. One unit per case (b2nd) or per group of
whole chunks (zarr)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import numpy as np
import zarr
from pydantic import Field, PrivateAttr, field_validator

from .errors import ConfigError, InputError
from .io.storage.arrays import ArraySpec, Codec, ensure_array, ensure_group, open_for_write, write_region
from .runtime.core.regions import group_regions, region_slices
from .io.storage.atomic import atomic_write_bytes, atomic_write_json
from .io.training.b2layout import block_options, nnunet_layout, patch_layout
from .io.training.b2store import cparams, write_b2nd
from .io.storage.guard import META_DIR as SUMMARY_DIR
from .io.training.nnunet import (NOTE, is_nnunet_folder, layout_note, open_array, own_codec, patch_for,
                                 plans_patch_size, read_cases)
from .io.training.nnunet import Case as NnunetCase
from .io.training.store_check import COMPRESS_SUMMARY, SUMMARY_ATTR, compress_summary
from .io.training.codec_trial import (Policy, Trial, choose, choose_for_patches, choose_no_larger, run_patch_trials,
                                      run_trials, sample_chunks)
from .io.ngff.metadata import Level, make_axes, write_image_metadata
from .io.readers.sources import Source, case_paths, default_axes, describe, open_source, refuse_name_collisions
from .io.storage.subtrees import carry_subtrees
from .runtime.core.contract import MAX_LEVEL, MAX_MB, PlanContext, PositiveInt, TaskParams, Unit
from .io.storage.fingerprint import fingerprint
from .io.storage.location import Location, as_location, on_disk, stored_bytes
from .io.storage.handles import writable_url

SUMMARY = COMPRESS_SUMMARY
ZARR_CNAMES = {"lz4", "lz4hc", "zstd", "blosclz", "zlib"}


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "brain.ome.zarr", "output": "brain-b2nd", "patch": [32, 64, 64]},
           "after": "generate"}


class Params(TaskParams):
    OBJECT_STORES = True  # a zarr / OME-Zarr input may be s3:// or https://, the output s3://

    input: str = Field(description=".npy/TIFF file, folder of cases, zarr array or OME-Zarr image")
    output: str = Field(description="folder of .b2nd files (format b2nd), or a .zarr store (format zarr)")
    format: Literal["b2nd", "zarr"] = Field("b2nd", description="b2nd: one Blosc2 .b2nd file per case (read memory-"
                                                                "mapped, one thread per reader); zarr: a zarr v3 "
                                                                "store with Blosc codecs, one OME-Zarr image per "
                                                                "case")
    patch: list[PositiveInt] | None = Field(None, min_length=2, max_length=3, description="training patch size, spatial "
                                            "axes (e.g. [128,128,128] or [20,50,50]); an nnU-Net folder's default: "
                                            "its plans file")
    layout: Literal["zarrmill", "nnunet", "blosc2"] = Field("zarrmill", description="chunk/block rule; nnunet and blosc2 are baselines")
    chunks: list[PositiveInt] | None = Field(None, description="override chunk shape (all axes)")
    blocks: list[PositiveInt] | None = Field(None, description="override block shape (all axes, b2nd)")
    codec: Literal["auto", "lz4", "lz4hc", "zstd", "blosclz", "zlib"] = Field(
        "auto", description="Blosc compressor; auto: compressor, level and filter chosen by a trial on sampled "
                            "chunks under policy, and recorded in each output")
    clevel: int = Field(5, ge=0, le=9, description="level when codec is not auto")
    filter: Literal["shuffle", "bitshuffle", "nofilter", "shuffle+bytedelta"] = Field(
        "shuffle", description="when codec is not auto (shuffle+bytedelta: format b2nd only)")
    policy: Policy = Field("balanced", description="codec trial: ratio, speed or balanced")
    min_ratio: float | None = Field(None, gt=0, le=100, description="codec trial (format b2nd): the fastest patch read "
                                    "(decode speed / over-read, block shapes tried too) among candidates of at "
                                    "least this compression ratio; refused before writing if none reaches it")
    trial_chunks: int = Field(4, ge=1, le=64, description="chunks sampled for the codec trial")
    shards: list[PositiveInt] | None = Field(None, description="zarr: shard shape, whole chunks")
    level: int = Field(0, ge=0, le=MAX_LEVEL, description="OME-Zarr input: pyramid level")
    axes: str | None = Field(None, description=".npy of 4+ dimensions: axes if not 'czyx'")
    unit_mb: float = Field(64.0, gt=0, le=MAX_MB, description="format zarr: target size of one unit of work (whole "
                                                              "chunks/shards are never split); format b2nd: one unit"
                                                              " per case")

    _nnunet: bool | None = PrivateAttr(None)
    _patch: list[int] | None = PrivateAttr(None)

    @field_validator("output")
    @classmethod
    def _a_folder(cls, v: str) -> str:
        if v.rstrip("/").endswith(".b2nd"):
            raise ValueError("output is a folder (each case becomes <output>/<case>.b2nd, beside the "
                             "run's ledger); drop the .b2nd suffix")
        return v


def _nnunet(p: Params) -> bool:
    """Asked per source and per unit: the folder is scanned once per Params (one run)."""
    if p._nnunet is None:
        local = on_disk(p.input)
        p._nnunet = local is not None and is_nnunet_folder(local)
    return p._nnunet


def _sources(p: Params) -> list[Source]:
    if _nnunet(p):  # data and segmentation of each case, each an array of its own
        cases, _ = read_cases(Path(p.input))
        return [_nnunet_source(path, name, member) for c in cases for name, path, member in _arrays_of(c)]
    return refuse_name_collisions([open_source(path, p.level, p.axes) for path in case_paths(p.input)])


def _arrays_of(case: NnunetCase) -> list[tuple[str, Path, str]]:
    return [(case.identifier, case.data, "data"), (f"{case.identifier}_seg", case.seg or case.data, "seg")]


def _nnunet_source(path: Path, name: str, member: str) -> Source:
    shape, dtype, read = open_array(path, member)
    return Source(name, path, shape, dtype, read, {}, default_axes(len(shape)))


def patch_of(p: Params) -> list[int]:
    """The patch given, or the plans file's (read once per Params)."""
    if p._patch is None:
        p._patch = patch_for(p.input, p.patch)
    return p._patch


def layout_for(p: Params, src: Source) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    patch = patch_of(p)
    spatial = src.shape[-len(patch):]
    if len(src.shape) < len(patch):
        raise InputError(f"{src.path}: {len(src.shape)} axes, but the patch {patch} has {len(patch)}")
    if any(pp > s for pp, s in zip(patch, spatial)) and not _nnunet(p):
        raise InputError(f"{src.path}: patch {patch} is larger than the image {list(spatial)} on some "
                         f"axis; use a smaller patch or pad the image")
    patch = [min(pp, s) for pp, s in zip(patch, spatial)]  # nnU-Net pads cases smaller than its patch
    itemsize = src.dtype.itemsize
    if p.layout == "nnunet":
        chunks, blocks = nnunet_layout(src.shape, itemsize, patch)
    elif p.layout == "blosc2":
        chunks, blocks = None, None  # blosc2's own defaults
    else:
        chunks, blocks = patch_layout(src.shape, itemsize, patch)
    for name, value in (("chunks", p.chunks), ("blocks", p.blocks)):
        if value is not None and len(value) != len(src.shape):
            raise ConfigError(f"{name} {value} needs {len(src.shape)} entries for {src.path}")
    chunks = tuple(p.chunks) if p.chunks else chunks
    blocks = tuple(p.blocks) if p.blocks else blocks
    if chunks is None:
        import blosc2

        chunks, blocks = blosc2.compute_chunks_blocks(src.shape, dtype=src.dtype)
    return tuple(min(c, s) for c, s in zip(chunks, src.shape)), tuple(blocks) if blocks else None


def codec_choices(p: Params, sources: list[Source]) -> dict[str, dict]:
    """One codec per dtype (an nnU-Net folder's float32 data and int8 segmentation compress
    differently), each chosen by trial on its own arrays."""
    by_dtype: dict[str, list[Source]] = {}
    for src in sources:
        by_dtype.setdefault(str(src.dtype), []).append(src)
    return {dtype: codec_choice(p, group) for dtype, group in by_dtype.items()}


def codec_choice(p: Params, sources: list[Source]) -> dict:
    """By parameters, or by trial on sampled chunks under ``policy``. For an nnU-Net folder the
    trial has a floor: no more bytes than nnU-Net's own codec on the same chunks, then the fastest."""
    if p.min_ratio is not None and (p.codec != "auto" or p.format != "b2nd"):
        raise ConfigError("min_ratio needs codec auto and format b2nd (the trial picks codec and block shape)")
    if p.format == "zarr" and "+" in p.filter:
        raise ConfigError(f"filter {p.filter} is for format b2nd (zarr's Blosc codec has no bytedelta)")
    if p.codec != "auto":
        return {"codec": p.codec, "clevel": p.clevel, "filter": p.filter, "chosen_by": "parameters"}
    samples = []
    for src in sources[:4]:
        chunks, _ = layout_for(p, src)
        samples += sample_chunks(src.read, src.shape, chunks, max(1, p.trial_chunks // min(len(sources), 4)))
    chunks, blocks = layout_for(p, sources[0])
    if p.min_ratio is not None:
        return _for_patches(p, samples, chunks, blocks or samples[0].shape)
    trials = run_trials(samples, blocks or samples[0].shape)
    if p.format == "zarr":
        trials = [t for t in trials if t.codec in ZARR_CNAMES] or trials
    own = own_codec(sources[0].path) if _nnunet(p) else None
    baseline = next((t for t in trials if (t.codec, t.clevel, t.filter) == own), None)
    if baseline is not None:
        best = choose_no_larger(trials, baseline)
        how = (f"trial: the fastest to decompress of those at least as small as nnU-Net's own "
               f"{own[0]}-{own[1]} + {own[2]} (ratio {baseline.ratio:.3f})")
    else:
        best, how = choose(trials, p.policy), f"trial ({p.policy})"
    return _choice(best, how, samples, trials)


def _for_patches(p: Params, samples: list, chunks: tuple[int, ...], blocks: tuple[int, ...]) -> dict:
    """min_ratio: codecs x block shapes (the given ``blocks`` only, if set), the fastest patch read."""
    more = [] if p.blocks else block_options(chunks, blocks, patch_of(p), samples[0].itemsize)
    trials = run_patch_trials(samples, blocks, patch_of(p), more)
    best = choose_for_patches(trials, p.min_ratio)
    if best is None:
        top = max(trials, key=lambda t: t.ratio)
        raise ConfigError(f"no lossless candidate reaches min_ratio {p.min_ratio} on {len(samples)} sampled chunks "
                          f"(best {top.ratio:.3f}: {top.codec}-{top.clevel} + {top.filter}); lower min_ratio")
    how = f"trial: the fastest patch read (decode GB/s / over-read) of those at ratio >= {p.min_ratio}"
    return {**_choice(best, how, samples, trials), "blocks": list(best.blocks)}


def _choice(best: Trial, how: str, samples: list, trials: list[Trial]) -> dict:
    return {"codec": best.codec, "clevel": best.clevel, "filter": best.filter, "chosen_by": how,
            "trial_samples": len(samples), "trial": [t.as_dict() for t in trials]}


def chosen_blocks(src: Source, blocks: tuple[int, ...] | None, choice: dict) -> tuple[int, ...] | None:
    """The trial's block shape (min_ratio) for ``src``, else the layout's."""
    if not choice.get("blocks"):
        return blocks
    n = min(len(choice["blocks"]), len(src.shape))
    spatial = [min(b, s) for b, s in zip(choice["blocks"][-n:], src.shape[-n:])]
    return (1,) * (len(src.shape) - n) + tuple(spatial)


def _out_path(p: Params, src: Source, n_sources: int) -> Location:
    out = as_location(p.output)
    if p.format == "b2nd":
        return out / f"{src.name}.b2nd"
    return out / src.name


def _zarr_array(p: Params, src: Source) -> Location:
    return as_location(p.output) / src.name / "0"


def plan(p: Params, ctx: PlanContext) -> list[Unit]:
    if _nnunet(p) and p.format != "b2nd":
        raise ConfigError(f"{p.input}: an nnU-Net folder becomes an nnU-Net folder of .b2nd files; drop format=zarr")
    sources = _sources(p)
    patch = patch_of(p)
    trial = _trial_key(p, sources)
    choices = _earlier_choices(p, trial) or codec_choices(p, sources)
    choice = choices[str(sources[0].dtype)]
    out = as_location(p.output)
    units: list[Unit] = []
    if p.format == "zarr":
        ensure_group(out, 3, ctx)
    for i, src in enumerate(sources):
        chunks, blocks = layout_for(p, src)
        blocks = chosen_blocks(src, blocks, choices[str(src.dtype)])
        base = {"case": i, "path": str(src.path), "out": str(_out_path(p, src, len(sources))), "name": src.name,
                "chunks": list(chunks), "blocks": list(blocks) if blocks else None,
                "codec": {k: choices[str(src.dtype)][k] for k in ("codec", "clevel", "filter")},
                **({"member": "seg" if src.name.endswith("_seg") else "data"} if _nnunet(p) else {})}
        if p.format == "b2nd":
            units.append({"id": src.name, **base})
            continue
        spec = _zarr_spec(p, src, chunks, choice)
        ensure_group(out / src.name, 3, ctx)
        ensure_array(out / src.name, "0", spec, ctx)
        for j, reg in enumerate(group_regions(spec.shape, spec.write_block, src.dtype.itemsize, int(p.unit_mb * 2**20))):
            units.append({"id": f"{src.name}:{j}", **base, "region": [list(r) for r in reg]})
    _write_summary(p, ctx, {"state": "running", "format": p.format, "patch": patch, "layout": p.layout,
                            "codec": choice, "codecs": choices, "trial": trial, "nnunet": _nnunet(p),
                            "cases": [describe(s) for s in sources]})
    return units


def _trial_key(p: Params, sources: list[Source]) -> str:
    """What a codec trial depends on: the parameters (but the output's path) and the cases, their
    files' sizes and times included (a case rewritten in place is a new trial, never the old one's
    choice: it might not reach ``min_ratio`` on the new pixels)."""
    files = fingerprint([s.path for s in sources])
    text = json.dumps([p.model_dump(exclude={"output"}), [describe(s) for s in sources], files], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _earlier_choices(p: Params, trial: str) -> dict[str, dict] | None:
    """The codecs an earlier run of the same trial chose, saved in its summary: a trial is timed,
    so a rerun (after a kill, or of a finished set) could choose differently from the cases it
    already wrote; it keeps their codecs and block shapes instead."""
    earlier = compress_summary(as_location(p.output)) or {}
    return earlier.get("codecs") if earlier.get("trial") == trial else None


def _write_summary(p: Params, ctx: PlanContext, summary: dict) -> None:
    """A .b2nd set: ``zarrmill/compress.json`` (nnU-Net takes every top-level file for a case); a
    zarr set: the root group's ``zarrmill.compress_set`` attributes (no stray file in a zarr store)."""
    out = as_location(p.output)
    if p.format == "b2nd":
        ctx.guard.make_dirs(out / SUMMARY_DIR)
        atomic_write_json(out / SUMMARY, summary)
        return
    group = zarr.open_group(writable_url(out), mode="a")
    group.attrs["zarrmill"] = {**group.attrs.get("zarrmill", {}), SUMMARY_ATTR: summary}


def _zarr_spec(p: Params, src: Source, chunks: tuple[int, ...], choice: dict) -> ArraySpec:
    shuffle = {"nofilter": "noshuffle"}.get(choice["filter"], choice["filter"])
    codec = Codec(cname=choice["codec"], clevel=choice["clevel"], shuffle=shuffle)
    shards = tuple(p.shards) if p.shards else None
    if shards and any(s % c for s, c in zip(shards, chunks)):
        raise ConfigError(f"shards {list(shards)} must be whole multiples of chunks {list(chunks)}")
    return ArraySpec(src.shape, str(src.dtype), chunks, shards, codec, 3, tuple(src.axes))


def run_unit(p: Params, unit: Unit) -> int:
    if "member" in unit:  # an nnU-Net array
        src = _nnunet_source(Path(unit["path"]), unit["name"], unit["member"])
    else:
        src = open_source(unit["path"], p.level, p.axes)  # only this unit's case
    c = unit["codec"]
    if p.format == "b2nd":
        params = cparams(c["codec"], c["clevel"], c["filter"], src.dtype.itemsize)
        meta = {"source": str(src.path), "patch": patch_of(p), "layout": p.layout, **c,
                "chunks": unit["chunks"], "blocks": unit["blocks"]}
        blocks = unit["blocks"] or None
        if blocks is None:
            import blosc2

            _, blocks = blosc2.compute_chunks_blocks(src.shape, unit["chunks"], dtype=src.dtype)
        return write_b2nd(as_location(unit["out"]), src.shape, src.dtype, src.read, unit["chunks"], blocks, params, meta)
    sl = region_slices(unit["region"])
    data = src.read(sl)
    arr = open_for_write(_zarr_array(p, src))
    write_region(arr, [a for a, _ in unit["region"]], data)
    if not np.array_equal(arr[sl], data, equal_nan=data.dtype.kind == "f"):
        raise RuntimeError(f"{_zarr_array(p, src)}: round trip differs in {unit['region']}")
    return int(data.nbytes)


def finish(p: Params, ctx: PlanContext) -> None:
    summary = dict(compress_summary(as_location(p.output)) or {})
    sources = _sources(p)
    cases = []
    for src in sources:
        path = _out_path(p, src, len(sources))
        size = stored_bytes(path)
        cases.append({**describe(src), "output": str(path), "bytes": size,
                      "ratio": round(int(np.prod(src.shape)) * src.dtype.itemsize / max(size, 1), 3)})
    summary.update({"state": "done", "cases": cases})
    if p.format == "zarr":
        for src in sources:
            scale = [src.pixel_size.get(a, 1.0) for a in src.axes]
            write_image_metadata(as_location(p.output) / src.name, "0.5", make_axes(src.axes), [Level("0", scale, None)],
                                 name=src.name)
            if src.path.is_dir():  # an OME-Zarr image: its ROI tables and label images come along
                carry_subtrees(src.path, as_location(p.output) / src.name, 3, ctx.guard)
            zarr.open_group(writable_url(as_location(p.output) / src.name), mode="a").attrs["zarrmill"] = {
                "compress": {k: summary["codec"][k] for k in ("codec", "clevel", "filter", "chosen_by")},
                "patch": patch_of(p), "layout": p.layout}
    if _nnunet(p):
        _finish_nnunet(p, ctx, summary, sources)
    _write_summary(p, ctx, summary)


def _finish_nnunet(p: Params, ctx: PlanContext, summary: dict, sources: list[Source]) -> None:
    """The properties (.pkl) and every other file nnU-Net keeps in the folder, carried byte for
    byte; the note on the layout chosen in ``zarrmill/layout.md``."""
    out = as_location(p.output)
    cases, others = read_cases(Path(p.input))
    for path in [c.properties for c in cases] + others:
        target = ctx.guard.will_create(ctx.guard.contain(out / path.name, what="nnU-Net file name"))
        atomic_write_bytes(target, path.read_bytes())
    found = plans_patch_size(Path(p.input))
    choices: dict = {"patch": patch_of(p), "patch_from": "patch parameter" if p.patch else f"plans file {found[1]}"}
    for kind, src in (("data", sources[0]), ("seg", sources[1])):
        chunks, blocks = layout_for(p, src)
        choice = summary["codecs"][str(src.dtype)]
        blocks = chosen_blocks(src, blocks, choice)
        choices[kind] = {"dtype": str(src.dtype), "chunks": list(chunks), "blocks": list(blocks or []), **{
            k: choice[k] for k in ("codec", "clevel", "filter", "chosen_by")}}
    atomic_write_bytes(out / SUMMARY_DIR / NOTE, layout_note(choices).encode())


def describe_unit(unit: Unit) -> str:
    return f"case {unit['name']}" + (f" region {unit['region']}" if "region" in unit else "")
