"""Tune compression for random patch reads on a sample of your own data.

Writes the sample (a crop of the first cases) with every candidate layout (zarrmill's rule and
variants with half / double blocks, nnU-Net v2.8's rule, blosc2's defaults) and codec (lz4, lz4hc,
zstd-1; shuffle or bitshuffle), measures the compression ratio and random-patch reads per second
with N single-threaded reader processes (like training workers), within a time budget. Prints a
table, saves ``tune.csv`` and ``tune.png`` (ratio vs patches/s, Pareto front marked), and writes
``recommended.yaml``: parameters ``zarrmill task compress --params`` accepts. Units run one after
another (each its own stage) so measurements never compete for the CPU."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import Field, PrivateAttr

from .io.training.b2layout import nnunet_layout, patch_layout
from .io.training.b2store import cparams, write_b2nd
from .io.training.codec_trial import Policy
from .io.storage.atomic import atomic_write_bytes
from .io.storage.guard import OutputGuard
from .io.training.patch_bench import patch_throughput
from .io.storage.location import on_disk
from .io.readers.sources import case_paths, open_source, refuse_name_collisions
from .io.training.nnunet import is_nnunet_folder, open_array, patch_for, read_cases
from .runtime.core.contract import MAX_COUNT, MAX_INDEX, THREADS, PlanContext, PositiveInt, TaskParams, Unit

# its units start reader processes of their own (training workers, patch_bench.py), which a dask
# worker process (daemonic) may not: under auto and local they run on threads in this process
WORKERS = THREADS
CODECS = [("lz4", 5), ("lz4hc", 5), ("zstd", 1)]
FILTERS = ["shuffle", "bitshuffle"]
LAYOUTS = ["zarrmill", "zarrmill-half-blocks", "zarrmill-double-blocks", "nnunet", "blosc2"]


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "brain.ome.zarr", "output": "tune", "patch": [16, 64, 64], "seconds": 3,
                      "layouts": ["zarrmill", "nnunet"]},
           "after": "generate"}


class Params(TaskParams):
    OBJECT_STORES = True  # the sample may be a zarr / OME-Zarr on s3:// or https://
    LOCAL_FIELDS = ("output",)
    LOCAL_WHY = ("tune measures patch reads from local disk, as training workers make them: its output is a "
                 "local folder (a zarr sample may be a URL)")

    input: str = Field(description="a sample of your data: file(s) as compress takes them")
    output: str = Field(description="folder for tune.csv, tune.png, recommended.yaml and sample files")
    patch: list[PositiveInt] | None = Field(None, min_length=2, max_length=3, description="training patch size "
                                            "(spatial axes); an nnU-Net folder's default: its plans file")
    seconds: float = Field(60.0, gt=0, le=604_800, description="time budget for all read measurements")
    processes: int = Field(1, ge=1, le=64, description="reader processes (training workers), one thread each")
    policy: Policy = Field("balanced", description="how to pick the recommendation: ratio, speed, balanced")
    sample_cases: int = Field(2, ge=1, le=MAX_COUNT, description="cases of the input to sample")
    crop: int = Field(4, ge=1, le=MAX_INDEX, description="crop each sample case to this many patches per spatial axis")
    layouts: list[Literal["zarrmill", "zarrmill-half-blocks", "zarrmill-double-blocks", "nnunet", "blosc2"]] = Field(
        default_factory=lambda: list(LAYOUTS), description="chunk and block layouts to measure: zarrmill's rule and "
                                                           "its variants with half or double blocks, nnU-Net v2.8's "
                                                           "rule, blosc2's defaults")

    _patch: list[int] | None = PrivateAttr(None)
    _nnunet_data: list[Path] | None = PrivateAttr(None)


def _candidates(p: Params) -> list[dict]:
    return [{"layout": lay, "codec": c, "clevel": lv, "filter": f} for lay in p.layouts for c, lv in CODECS for f in FILTERS]


def _patch(p: Params) -> list[int]:
    """The patch given, or the plans file's (read once per Params)."""
    if p._patch is None:
        p._patch = patch_for(p.input, p.patch)
    return p._patch


def _nnunet_data(p: Params) -> list[Path]:
    """The data files of the first cases of an nnU-Net folder ([] for any other input); the
    folder is scanned once per Params."""
    if p._nnunet_data is None:
        p._nnunet_data = ([c.data for c in read_cases(Path(p.input))[0][:p.sample_cases]]
                          if (local := on_disk(p.input)) is not None and is_nnunet_folder(local) else [])
    return p._nnunet_data


def _samples(p: Params):
    out = []
    patch = _patch(p)
    if _nnunet_data(p):
        sources = [(path.stem, *open_array(path, "data")) for path in _nnunet_data(p)]
    else:
        sources = [(s.name, s.shape, s.dtype, s.read) for s in
                   refuse_name_collisions([open_source(path) for path in case_paths(p.input)[:p.sample_cases]])]
    for name, shape, _, read in sources:
        n = len(patch)
        crop = tuple(slice(None) for _ in shape[:-n]) + tuple(
            slice(0, min(s, c * p.crop)) for s, c in zip(shape[-n:], patch))
        out.append((name, np.ascontiguousarray(read(crop))))
    return out


def _layout(name: str, shape: tuple[int, ...], itemsize: int, patch: list[int]):
    if name == "nnunet":
        return nnunet_layout(shape, itemsize, patch)
    if name == "blosc2":
        import blosc2

        return blosc2.compute_chunks_blocks(shape, dtype=np.dtype(f"V{itemsize}"))
    chunks, blocks = patch_layout(shape, itemsize, patch)
    scale = {"zarrmill-half-blocks": 0.5, "zarrmill-double-blocks": 2.0}.get(name, 1.0)
    blocks = tuple(max(1, min(c, int(b * scale))) for b, c in zip(blocks, chunks))
    return chunks, blocks


def plan(p: Params, ctx: PlanContext) -> list[Unit]:
    out = Path(p.output)
    samples = _samples(p)  # read (and validated) before anything is written; every unit loads these crops
    if (out / "samples").exists():  # an earlier run's, in an output zarrmill created
        (ctx.guard or OutputGuard(out)).remove(out / "samples")
    patch = _patch(p)
    for name, data in samples:
        buffer = io.BytesIO()
        np.save(buffer, data)  # written below the output's handle, its folders made as it is (handles.py)
        atomic_write_bytes(out / "samples" / "source" / f"{name}.npy", buffer.getvalue(), durable=False)
        if any(pp > s for pp, s in zip(patch, data.shape[-len(patch):])) and not _nnunet_data(p):
            from .errors import InputError

            raise InputError(f"{name}: patch {patch} is larger than the image {list(data.shape)}")
    cands = _candidates(p)
    own = [path for path in _nnunet_data(p) if path.suffix == ".b2nd"]
    per = p.seconds / (len(cands) + 1 + bool(own))
    units = [{"id": "npy", "stage": 0, "kind": "npy", "seconds": per}]
    if own:  # nnU-Net's own files as it wrote them: the baseline row
        units.append({"id": "nnunet-own-files", "stage": len(cands) + 1, "kind": "own", "seconds": per,
                      "paths": [str(path) for path in own]})
    units += [{"id": f"{c['layout']}-{c['codec']}{c['clevel']}-{c['filter']}", "stage": i + 1, "kind": "b2nd",
               "seconds": per, **c} for i, c in enumerate(cands)]
    return units


def _reader(p: Params) -> str:
    """nnU-Net's own reading path for nnU-Net folders, zarrmill's otherwise."""
    return "nnunet" if _nnunet_data(p) else "zarrmill"


def _own_row(p: Params, unit: Unit) -> int:
    """Patches/s and ratio of nnU-Net's own .b2nd files, whole, as they were written."""
    import blosc2

    paths = [Path(path) for path in unit["paths"]]
    raw = comp = 0
    for path in paths:
        arr = blosc2.open(str(path), mode="r")
        raw += int(np.prod(arr.shape)) * arr.dtype.itemsize
        comp += path.stat().st_size
        cp = arr.schunk.cparams
        codec = getattr(cp, "codec", None) or cp["codec"]
        clevel = getattr(cp, "clevel", None) if not isinstance(cp, dict) else cp["clevel"]
        filters = getattr(cp, "filters", None) if not isinstance(cp, dict) else cp["filters"]
        chunks, blocks = list(arr.chunks), list(arr.blocks)
    rate, mbs = patch_throughput(paths, _patch(p), unit["seconds"], p.processes, reader="nnunet")
    names = [getattr(f, "name", str(f)).lower() for f in filters if getattr(f, "name", str(f)) != "NOFILTER"]
    row = {"id": unit["id"], "layout": "nnU-Net's own files", "codec": getattr(codec, "name", str(codec)).lower(),
           "clevel": clevel, "filter": names[-1] if names else "nofilter", "chunks": chunks, "blocks": blocks,
           "ratio": round(raw / comp, 3), "patches_per_s": round(rate, 1), "mb_per_s": round(mbs, 1),
           "reader": "nnunet", "sample_mb": round(raw / 1e6, 6)}
    atomic_write_bytes(Path(p.output) / "samples" / f"{unit['id']}.yaml", yaml.safe_dump(row).encode())
    return raw


def run_unit(p: Params, unit: Unit) -> int:
    if unit["kind"] == "own":
        return _own_row(p, unit)
    out = Path(p.output) / "samples" / unit["id"]
    guard = OutputGuard(p.output)  # the sample folder goes through the guard: never through a swapped-in link
    guard.remove(out)
    paths, raw, comp = [], 0, 0
    for src in sorted((Path(p.output) / "samples" / "source").glob("*.npy")):
        name, data = src.stem, np.load(src)
        if unit["kind"] == "npy":
            path = out / f"{name}.npy"
            buffer = io.BytesIO()
            np.save(buffer, data)
            atomic_write_bytes(path, buffer.getvalue(), durable=False)  # below the output's handle (handles.py)
            size = path.stat().st_size
        else:
            path = out / f"{name}.b2nd"
            chunks, blocks = _layout(unit["layout"], data.shape, data.itemsize,
                                     [min(a, s) for a, s in zip(_patch(p), data.shape[-len(_patch(p)):])])
            size = write_b2nd(path, data.shape, data.dtype, lambda sl, d=data: d[sl], chunks, blocks,
                              cparams(unit["codec"], unit["clevel"], unit["filter"], data.itemsize))
            unit = {**unit, "chunks": list(chunks), "blocks": list(blocks)}
        paths.append(path)
        raw += data.nbytes
        comp += size
    rate, mbs = patch_throughput(paths, _patch(p), unit["seconds"], p.processes, reader=_reader(p))
    row = {k: unit.get(k, "") for k in ("id", "layout", "codec", "clevel", "filter")}
    row.update({"chunks": unit.get("chunks", ""), "blocks": unit.get("blocks", ""), "ratio": round(raw / comp, 3),
                "patches_per_s": round(rate, 1), "mb_per_s": round(mbs, 1), "reader": _reader(p),
                "sample_mb": round(raw / 1e6, 6)})
    atomic_write_bytes(Path(p.output) / "samples" / f"{unit['id']}.yaml", yaml.safe_dump(row).encode())
    guard.remove(out)
    return raw


def finish(p: Params, ctx: PlanContext) -> None:
    out = Path(p.output)
    rows = [yaml.safe_load(f.read_text()) for f in sorted((out / "samples").glob("*.yaml"))]
    (ctx.guard or OutputGuard(out)).remove(out / "samples" / "source")
    npy = next(r for r in rows if r["id"] == "npy")
    own = next((r for r in rows if r["id"] == "nnunet-own-files"), None)
    rows = sorted((r for r in rows if r["id"] != "npy"), key=lambda r: -r["patches_per_s"])
    for r in rows:
        r["vs_npy"] = round(r["patches_per_s"] / max(npy["patches_per_s"], 1e-9), 3)
        r["vs_nnunet_files"] = round(r["patches_per_s"] / max(own["patches_per_s"], 1e-9), 3) if own else ""
    front = pareto([r for r in rows if r is not own])
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]) + ["pareto"])
    writer.writeheader()
    writer.writerows({**r, "pareto": r["id"] in front} for r in rows)
    atomic_write_bytes(out / "tune.csv", table.getvalue().encode())
    best = _recommend(rows, front, p.policy)
    rec = {"patch": _patch(p), "layout": "zarrmill", "codec": best["codec"], "clevel": best["clevel"],
           "filter": best["filter"]}
    if best["layout"] not in ("zarrmill",):
        rec.update({"layout": best["layout"] if best["layout"] in ("nnunet", "blosc2") else "zarrmill"})
        if best["layout"].startswith("zarrmill-"):
            rec.update({"chunks": best["chunks"], "blocks": best["blocks"]})
    atomic_write_bytes(out / "recommended.yaml", yaml.safe_dump(rec, sort_keys=False).encode())
    _print_table(npy, rows, front, best)
    _plot(out / "tune.png", npy, rows, front, best)


def pareto(rows: list[dict]) -> set[str]:
    """Candidates no other candidate beats on both ratio and patches/s."""
    return {r["id"] for r in rows if not any(
        o["ratio"] >= r["ratio"] and o["patches_per_s"] >= r["patches_per_s"] and
        (o["ratio"], o["patches_per_s"]) != (r["ratio"], r["patches_per_s"]) for o in rows)}


def _recommend(rows: list[dict], front: set[str], policy: Policy) -> dict:
    cands = [r for r in rows if r["id"] in front]
    if policy == "ratio":
        return max(cands, key=lambda r: (r["ratio"], r["patches_per_s"]))
    if policy == "speed":
        return max(cands, key=lambda r: (r["patches_per_s"], r["ratio"]))
    return max(cands, key=lambda r: r["ratio"] * math.sqrt(r["patches_per_s"]))


def _print_table(npy: dict, rows: list[dict], front: set[str], best: dict) -> None:
    print(f"npy (uncompressed memmap): {npy['patches_per_s']:.0f} patches/s, {npy['mb_per_s']:.0f} MB/s")
    print(f"{'candidate':42s} {'ratio':>6s} {'patches/s':>10s} {'vs npy':>7s}  pareto")
    for r in rows:
        mark = "*" if r["id"] in front else ""
        pick = "  <- recommended" if r["id"] == best["id"] else ""
        print(f"{r['id']:42s} {r['ratio']:6.2f} {r['patches_per_s']:10.0f} {r['vs_npy']:7.2f}  {mark}{pick}")


def _plot(path: Path, npy: dict, rows: list[dict], front: set[str], best: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no plot: pip install 'zarrmill[plot]' for {path.name})")
        return
    fig, ax = plt.subplots(figsize=(7, 5))
    for layout in sorted({r["layout"] for r in rows}):
        sel = [r for r in rows if r["layout"] == layout]
        ax.scatter([r["patches_per_s"] for r in sel], [r["ratio"] for r in sel], label=layout, alpha=0.7)
    fr = sorted((r for r in rows if r["id"] in front), key=lambda r: r["patches_per_s"])
    ax.plot([r["patches_per_s"] for r in fr], [r["ratio"] for r in fr], "k--", lw=1, label="Pareto front")
    ax.axvline(npy["patches_per_s"], color="grey", ls=":", label="npy memmap")
    ax.scatter([best["patches_per_s"]], [best["ratio"]], s=200, facecolors="none", edgecolors="red", label="recommended")
    ax.set_xlabel("random patches / s")
    ax.set_ylabel("compression ratio")
    ax.legend(fontsize=8)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    atomic_write_bytes(path, image.getvalue())
    plt.close(fig)
