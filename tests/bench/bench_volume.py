"""One TIFF volume to a pyramidal OME-Zarr image: zarrmill vs EuBI-Bridge.

  python tests/bench/bench_volume.py [--shape 64,2048,2048] [--repeat 2]
                                     [--eubi .venv-eubi/bin/eubi] [--workdir DIR]

The volume (uint16, microscopy-like: smooth structures at several scales plus shot noise, not
random bytes) is written once as a ZYX ImageJ TIFF (z step 1 um, pixel 0.5 um). Each tool writes a
pyramid down to levels of at most 64 pixels a side, as EuBI-Bridge does by default
(min_dimension_size 64):

- EuBI-Bridge (``eubi-bridge-lite`` 0.3.2, tensorstore writes, its own venv:
  ``python -m venv .venv-eubi && .venv-eubi/bin/pip install eubi-bridge-lite==0.3.2``), with its
  defaults (zarr v2) and with ``--zarr_format 3``; left out when the venv is missing;
- zarrmill ``ingest --set pyramid=true`` (one pass: each unit downsamples the region it holds);
- zarrmill ``ingest`` then ``pyramid`` (the two steps: level 0 written, then read back).

Wall time and peak RSS of the whole process tree, files and bytes written, level count; level 0 of
every output is compared with the TIFF, pixel for pixel. Each tool runs ``--repeat`` times,
alternating; the best time counts (the machine is shared)."""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import warnings

import numpy as np
import tifffile
import zarr
from measure import compile_zarrmill, files_and_bytes, run_measured, table, zarrmill

REPO = Path(__file__).resolve().parents[2]


def make_volume(shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """Blobs and fibres at a few scales (coarse random fields upsampled), background and shot noise,
    plane by plane so memory stays one volume."""
    from scipy.ndimage import zoom

    rng = np.random.default_rng(seed)
    z, y, x = shape
    coarse = [zoom(rng.random((max(2, z // s), max(2, y // (4 * s)), max(2, x // (4 * s)))),
                   (z / max(2, z // s), y / max(2, y // (4 * s)), x / max(2, x // (4 * s))), order=1)
              for s in (4, 16)]
    out = np.empty(shape, np.uint16)
    for k in range(z):
        signal = 400 + 3000 * np.clip(coarse[0][k] * coarse[1][k] - 0.2, 0, None)
        out[k] = np.minimum(rng.poisson(signal), 65535)
    return out


def eubi_levels(out: Path) -> Path:
    found = sorted(out.rglob("*.zarr"))
    if not found:
        raise RuntimeError(f"EuBI-Bridge wrote no .zarr under {out}")
    return found[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="64,2048,2048")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--eubi", default=str(REPO / ".venv-eubi" / "bin" / "eubi"))
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message="Object at OME is not recognized")  # EuBI-Bridge's OME-XML folder
    shape = tuple(int(s) for s in a.shape.split(","))
    compile_zarrmill()
    work = Path(tempfile.mkdtemp(prefix="bench-volume-", dir=a.workdir))
    try:
        vol = make_volume(shape)
        src = work / "vol.tif"
        tifffile.imwrite(src, vol, imagej=True, resolution=(2.0, 2.0), metadata={"axes": "ZYX", "spacing": 1.0})
        print(f"input: {src.stat().st_size / 1e6:.0f} MB TIFF, {shape} uint16", flush=True)
        tools = {
            "zarrmill ingest pyramid=true (one pass)": lambda out: [zarrmill(
                "task", "ingest", "--set", f"input={src}", "--set", f"output={out / 'vol.zarr'}",
                "--set", "pyramid=true", "--set", "min_size=64")],
            "zarrmill ingest, then pyramid (two steps)": lambda out: [
                zarrmill("task", "ingest", "--set", f"input={src}", "--set", f"output={out / 'vol.zarr'}"),
                zarrmill("task", "pyramid", "--set", f"input={out / 'vol.zarr'}", "--set", "min_size=64")],
        }
        if Path(a.eubi).exists():
            tools["EuBI-Bridge 0.3.2 (defaults: zarr v2)"] = lambda out: [
                [a.eubi, "to_zarr", str(src), "--output_path", str(out)]]
            tools["EuBI-Bridge 0.3.2 --zarr_format 3"] = lambda out: [
                [a.eubi, "to_zarr", str(src), "--output_path", str(out), "--zarr_format", "3"]]
        else:
            print(f"  EuBI-Bridge left out: no {a.eubi} (see the docstring)", flush=True)
        best: dict[str, tuple[float, float]] = {}
        outputs: dict[str, Path] = {}
        for r in range(a.repeat):
            for i, (name, cmds) in enumerate(tools.items()):
                out = work / f"out{i}-{r}"
                out.mkdir()
                steps = [run_measured(cmd) for cmd in cmds(out)]
                seconds, peak = sum(s.seconds for s in steps), max(s.peak_mb for s in steps)
                print(f"  {name}: {seconds:.1f} s, peak {peak:.0f} MB", flush=True)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, peak)
                if name in outputs:
                    shutil.rmtree(outputs[name], ignore_errors=True)
                outputs[name] = out
        rows, same = [], True
        eubi = next((n for n in best if n.startswith("EuBI")), None)
        for name, (seconds, peak) in best.items():
            image = eubi_levels(outputs[name])
            group = zarr.open_group(str(image), mode="r")
            levels = sorted(group.array_keys(), key=int)
            level0 = np.squeeze(group[levels[0]][:])
            same &= np.array_equal(level0, vol)
            files, nbytes = files_and_bytes(outputs[name])
            ratio = f"{best[eubi][0] / seconds:.2f}x" if eubi else "-"
            rows.append((name, f"{seconds:.1f}", ratio, f"{peak:.0f}", f"{nbytes / 1e6:.0f}", files, len(levels)))
        print()
        print(table(rows, ("method", "wall s", "vs EuBI-Bridge", "peak MB", "MB written", "files", "levels")))
        print(f"\nlevel 0 of every output vs the TIFF: {'identical' if same else 'DIFFERENT'}")
        if not same:
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
