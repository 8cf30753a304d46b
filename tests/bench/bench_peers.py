"""From a CellVoyager folder to a well-level OME-Zarr plate: zarrmill vs Fractal's and FMI's converters.

  python tests/bench/bench_peers.py [--wells 3[,12,48]] [--grid 2] [--z 4] [--channels 2] [--shape 2000,2000]
                                    [--processes 2] [--peers-python .venv-peers/bin/python]
                                    [--faim-python .venv-faim/bin/python] [--repeat 1] [--variants]

The folder is made by ``zarrmill task generate-plate`` (the mrf/mlf fields a real CV7000/CV8000
writes; Fractal's parser reads it) plus the measurement settings file (.mes) the mrf names, which
faim-ipa requires. Default: 3 wells x 2x2 fields x 4 z x 2 channels, 96 TIFFs of
2000 x 2000 uint16, the case of issue #17.

- fractal-uzh-converters (Fractal's CellVoyager converter, public API, ``--processes`` processes),
  from its own venv (tests/peers/requirements.txt; tests/run makes .venv-peers);
- faim-ipa (FMI's converter: stage-position fusion, ``--processes`` dask workers), from its own venv
  (it needs zarr 2: ``python -m venv .venv-faim && .venv-faim/bin/pip install -r
  tests/peers/faim-requirements.txt``; left out of the table when that venv is missing);
- zarrmill ``ingest layout: well`` with the default executor (``local``): same layout (one image
  per well, FOVs placed by stage position, pyramid, FOV and well ROI tables);
- zarrmill ``ingest`` (per-FOV) + ``reshard``: the two-pass way this replaces;
- floor: read every TIFF, compress it (zarrmill's codec) and write it, on all cores.

Wall time and peak RSS of the whole process tree (sampled every 50 ms), files and bytes written;
level 0 of every well is compared pixel for pixel between Fractal's and zarrmill's output. Each
tool runs ``--repeat`` times, alternating, the best time reported (the machine is shared).

``--wells 3,12,48`` runs the same comparison on plates of 3, 12 and 48 wells (same fields per
well; wells B03, B04, ... row by row over B..G x 03..10) in one run and adds a table of time per
well and peak memory per tool and plate size, each beside its 3-well figure: a converter whose
cost per well is flat shows 1.00x at every size."""
from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr
from bench_ingest import FLOOR
from measure import files_and_bytes, python, run_measured, table, zarrmill

REPO = Path(__file__).resolve().parents[2]


def well_names(n: int) -> list[str]:
    """n wells of a 96-well plate, row by row over rows B..G and columns 03..10 (48 at most)."""
    names = [f"{r}{c:02d}" for r in "BCDEFG" for c in range(3, 11)]
    if n > len(names):
        raise SystemExit(f"--wells: at most {len(names)}")
    return names[:n]


def generate(raw: Path, a: argparse.Namespace, n_wells: int) -> None:
    wells = ",".join(well_names(n_wells))
    run_measured(zarrmill("task", "generate-plate", "--executor", "local", "--set", f"output={raw}",
                          "--set", f"wells=[{wells}]", "--set", f"grid=[{a.grid},{a.grid}]",
                          "--set", f"shape=[{a.shape}]", "--set", f"z_planes={a.z}",
                          "--set", f"channels={a.channels}"))


def write_settings(raw: Path, channels: int) -> None:
    """The .mes a CellVoyager writes beside the mrf (the mrf names it): one bts:Channel per channel
    with the attributes faim-ipa reads (colour, filter, exposure, objective)."""
    ns = "http://www.yokogawa.co.jp/BTS/BTSSchema/1.0"
    name = ET.parse(raw / "MeasurementDetail.mrf").getroot().get(f"{{{ns}}}MeasurementSettingFileName")
    colors = ["#FF0000FF", "#FF00FF00", "#FFFF0000", "#FFFFFFFF"]
    rows = "\n".join(
        f'    <bts:Channel bts:Ch="{c}" bts:Target="Camera{c}" bts:Objective="20x v2" bts:Magnification="20" '
        f'bts:Method="Confocal" bts:Acquisition="BP{445 + 80 * c}/45" bts:ExposureTime="100" '
        f'bts:Binning="1" bts:Color="{colors[(c - 1) % 4]}" bts:Fluorophore="dye{c}" />'
        for c in range(1, channels + 1))
    (raw / name).write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementSetting xmlns:bts="{ns}">\n'
                            f'  <bts:ChannelList>\n{rows}\n  </bts:ChannelList>\n</bts:MeasurementSetting>\n')


def well_arrays(plate: Path) -> dict[str, zarr.Array]:
    """Level 0 of the (one) image of every well, opened (read one at a time: 48 wells are 12 GB)."""
    group = zarr.open_group(str(plate), mode="r")
    attrs = group.attrs.asdict()
    attrs = attrs.get("ome", attrs)
    out = {}
    for well in attrs["plate"]["wells"]:
        wa = zarr.open_group(str(plate / well["path"]), mode="r").attrs.asdict()
        image = (wa.get("ome", wa))["well"]["images"][0]["path"]
        out[well["path"]] = zarr.open_array(str(plate / well["path"] / image / "0"), mode="r")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wells", default="3", help="wells per plate; several sizes comma-separated (3,12,48)")
    ap.add_argument("--grid", type=int, default=2)
    ap.add_argument("--z", type=int, default=4)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--shape", default="2000,2000")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--peers-python", default=str(REPO / ".venv-peers" / "bin" / "python"))
    ap.add_argument("--faim-python", default=str(REPO / ".venv-faim" / "bin" / "python"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--variants", action="store_true",
                    help="also zarrmill with the old default codec (LZ4 5 + bitshuffle), and with --executor sync")
    ap.add_argument("--workdir", default=None, help="where to write (default: a temporary folder)")
    a = ap.parse_args()
    sizes = [int(n) for n in a.wells.split(",")]
    results = {}
    for k, n_wells in enumerate(sizes):
        work = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=a.workdir))
        try:
            results[n_wells] = compare(a, work, n_wells, two_pass=k == 0)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if len(sizes) > 1:
        first = sizes[0]
        rows = []
        for name in results[first]:
            for n_wells in sizes:
                seconds, peak, nbytes, files = results[n_wells].get(name, (None,) * 4)
                if seconds is None:
                    continue
                per_well, base = seconds / n_wells, results[first][name][0] / first
                rows.append((name, n_wells, f"{seconds:.1f}", f"{per_well:.2f}", f"{per_well / base:.2f}x",
                             f"{peak:.0f}", f"{peak / results[first][name][1]:.2f}x", f"{nbytes / 1e6:.0f}", files))
        print()
        print(table(rows, ("method", "wells", "wall s", "s per well", f"vs {first} wells", "peak MB",
                           f"vs {first} wells", "MB written", "files")))


def compare(a: argparse.Namespace, work: Path, n_wells: int, two_pass: bool) -> dict[str, tuple]:
    """One plate of ``n_wells`` through every tool: {name: (best seconds, its peak MB, bytes, files)}."""
    raw = work / "raw"
    generate(raw, a, n_wells)
    write_settings(raw, a.channels)
    n_files, raw_bytes = files_and_bytes(raw)
    print(f"input: {n_files} files, {raw_bytes / 1e6:.0f} MB ({n_wells} wells x {a.grid}x{a.grid} fields x "
          f"{a.z} z x {a.channels} channels, {a.shape} uint16)", flush=True)
    fractal_name, ours_name = f"fractal-uzh-converters ({a.processes} processes)", "zarrmill ingest layout: well (default executor and codec)"
    tools = {
        "floor: read + compress + write, all cores": lambda out: python(FLOOR.format(folder=str(raw), out=str(out))),
        fractal_name: lambda out: [
            a.peers_python, str(REPO / "tests" / "peers" / "fractal_cellvoyager.py"), str(raw), str(out),
            str(a.processes)],
        f"faim-ipa 0.14 ({a.processes} processes)": lambda out: [
            a.faim_python, str(REPO / "tests" / "peers" / "faim_convert_cellvoyager.py"), str(raw), str(out),
            str(a.processes)],
        ours_name: lambda out: zarrmill(
            "task", "ingest", "--set", f"input={raw}", "--set", f"output={out / 'plate.zarr'}",
            "--set", "layout=well"),
    }
    if a.variants:
        tools["zarrmill layout well, codec LZ4 5 + bitshuffle (the old default)"] = lambda out: zarrmill(
            "task", "ingest", "--set", f"input={raw}", "--set", f"output={out / 'plate.zarr'}", "--set", "layout=well",
            "--set", "codec.cname=lz4", "--set", "codec.clevel=5", "--set", "codec.shuffle=bitshuffle")
        tools["zarrmill layout well, --executor sync"] = lambda out: zarrmill(
            "task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out / 'plate.zarr'}",
            "--set", "layout=well")
    if not Path(a.faim_python).exists():
        print(f"  faim-ipa left out: no {a.faim_python} (see the docstring)", flush=True)
        tools = {k: v for k, v in tools.items() if not k.startswith("faim-ipa")}
    best: dict[str, tuple[float, float]] = {}
    outputs: dict[str, Path] = {}
    for r in range(a.repeat):
        for i, (name, cmd) in enumerate(tools.items()):
            out = work / f"out{i}-{r}"
            measured = run_measured(cmd(out))
            print(f"  {name}: {measured.seconds:.1f} s, peak {measured.peak_mb:.0f} MB", flush=True)
            if name not in best or measured.seconds < best[name][0]:
                best[name] = (measured.seconds, measured.peak_mb)
            if name in outputs:
                shutil.rmtree(outputs[name], ignore_errors=True)
            outputs[name] = out
    if two_pass:
        two = work / "two"
        fov = run_measured(zarrmill("task", "ingest", "--set", f"input={raw}", "--set", f"output={two / 'fov.zarr'}"))
        wells = run_measured(zarrmill("task", "reshard", "--set", f"input={two / 'fov.zarr'}",
                                      "--set", f"output={two / 'plate.zarr'}"))
        best["zarrmill ingest + reshard (two passes)"] = (fov.seconds + wells.seconds, max(fov.peak_mb, wells.peak_mb))
        outputs["zarrmill ingest + reshard (two passes)"] = two

    names = list(best)
    fractal_plate = outputs[fractal_name] / "plate.zarr"
    theirs, ours = well_arrays(fractal_plate), well_arrays(outputs[ours_name] / "plate.zarr")
    same = sorted(theirs) == sorted(ours) and all(np.array_equal(theirs[w][:], ours[w][:]) for w in theirs)
    rows, found = [], {}
    for name in names:
        seconds, peak = best[name]
        files, nbytes = files_and_bytes(outputs[name])
        found[name] = (seconds, peak, nbytes, files)
        rows.append((name, f"{seconds:.1f}", f"{best[fractal_name][0] / seconds:.2f}x",
                     f"{best[names[0]][0] / seconds:.2f}x", f"{peak:.0f}", f"{nbytes / 1e6:.0f}", files))
    print()
    print(table(rows, ("method", "wall s", "vs Fractal", "vs floor", "peak MB", "MB written", "files")))
    print(f"\nlevel 0 of every well, Fractal vs zarrmill layout well: {'identical' if same else 'DIFFERENT'}\n")
    if not same:
        sys.exit(1)
    return found


if __name__ == "__main__":
    main()
