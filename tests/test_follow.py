"""zarrmill follow: a CellVoyager measurement played back at an instrument's pace is converted well
by well; every plate seen while it runs passes check and opens; the finished plate equals a
one-shot conversion; a half-written mlf record is never read; a killed follower resumes; a well
re-acquired after its conversion is redone."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrmill.errors import InputError
from zarrmill.io.readers.growing import GrowingMlf
from zarrmill.io.readers.mlf import ROOT_END
from zarrmill.io.synthetic.playback import play_cellvoyager
from zarrmill.runtime.front.check import check_output
from zarrmill.runtime.front.commands import run_single_task

WELLS = ["B03", "B04", "C05"]
FOLLOW = ("--poll", "0.2", "--settle", "0.5", "--quiet", "60")


@pytest.fixture(scope="module")
def measurement(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("follow") / "raw"
    run_single_task("generate-plate", {"output": str(raw), "format": "cellvoyager", "wells": WELLS, "grid": [1, 2],
                                       "shape": [48, 64], "channels": 2, "z_planes": 2}, "sync", False)
    return raw


def _follower(live: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zarrmill", "follow", "--set", f"input={live}",
                             "--set", f"output={out}", *FOLLOW, *extra], stderr=subprocess.PIPE, text=True)


def _start_playback(raw: Path, live: Path, **kw) -> threading.Thread:
    # one plane file at a time, ~0.2 s each: a well of 8 planes takes ~1.6 s, as a slow instrument
    thread = threading.Thread(target=play_cellvoyager, args=(raw, live), kwargs={"mb_per_s": 0.03, **kw})
    thread.start()
    while not (live / "MeasurementData.mlf").exists():
        time.sleep(0.01)
    return thread


def _tree(root: Path) -> dict[str, object]:
    """Every group's attributes (provenance aside) and every array's pixels."""
    out: dict[str, object] = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        attrs = dict(group.attrs)
        attrs.pop("zarrmill", None) if prefix == "" else None  # the root names the run: provenance
        out[prefix or "/"] = json.dumps(attrs, sort_keys=True)
        for name, member in group.members():
            if isinstance(member, zarr.Group):
                walk(member, f"{prefix}{name}/")
            else:
                out[f"{prefix}{name}"] = (json.dumps(dict(member.attrs), sort_keys=True), member[...])
    walk(zarr.open_group(str(root), mode="r"), "")
    return out


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], tuple):
            assert a[key][0] == b[key][0], key
            np.testing.assert_array_equal(a[key][1], b[key][1], err_msg=key)
        else:
            assert a[key] == b[key], key


def _wells_listed(root: Path) -> list[str]:
    try:
        attrs = json.loads((root / "zarr.json").read_text())["attributes"]["ome"]["plate"]
    except (OSError, KeyError, ValueError):
        return []
    return [w["path"] for w in attrs["wells"]]


def _one_shot(raw: Path, out: Path) -> dict:
    run_single_task("ingest", {"input": str(raw), "output": str(out)}, "sync", False)
    return _tree(out)


def test_wells_appear_in_order_each_valid_and_the_plate_ends_as_a_one_shot_conversion(measurement, tmp_path):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    playback = _start_playback(measurement, live)
    follower = _follower(live, out)
    seen: list[list[str]] = []
    while True:
        running = follower.poll() is None
        wells = _wells_listed(out)
        if wells and (not seen or wells != seen[-1]):
            seen.append(wells)
            result = check_output(out)  # valid the moment it lists a well: pixels and metadata
            assert not result.problems, result.problems
            for path in wells:
                image = zarr.open_group(str(out / path / "0"), mode="r")
                assert image["0"][...].any()  # the well's pixels are there when it is listed
        if not running:
            break
        time.sleep(0.05)
    playback.join()
    err = follower.stderr.read()
    assert follower.returncode == 0, err
    assert len(seen) >= 2 and seen[0] != seen[-1], (seen, err)  # listed while later wells were being imaged
    assert all(seen[i] == seen[i + 1][:len(seen[i])] for i in range(len(seen) - 1))  # in order, none dropped
    assert seen[-1] == ["B/03", "B/04", "C/05"]
    assert "converted and viewable: B03" in err
    assert "the instrument says the acquisition ended" in err
    assert not check_output(out).problems
    _same(_tree(out), _one_shot(live, tmp_path / "oneshot.ome.zarr"))


def test_a_half_written_record_is_not_read_and_the_end_is_the_closing_tag(measurement, tmp_path):
    text = (measurement / "MeasurementData.mlf").read_bytes()
    header, _, rest = text.partition(b"<bts:MeasurementRecord")
    records = [b"<bts:MeasurementRecord" + r for r in rest.split(b"<bts:MeasurementRecord") if r.strip()]
    records[-1] = records[-1].replace(ROOT_END, b"")
    mlf = tmp_path / "MeasurementData.mlf"
    mlf.write_bytes(header + records[0] + records[1][:40])
    growing = GrowingMlf(mlf, measurement)
    assert growing.read_new() and growing.columns.n == 1 and not growing.ended
    with open(mlf, "ab") as fh:
        fh.write(records[1][40:] + records[2][:-10])
    assert growing.read_new() and growing.columns.n == 2  # the second now whole, the third not
    size = growing.offset
    with open(mlf, "ab") as fh:
        fh.write(records[2][-10:] + ROOT_END + b"\n")
    assert growing.read_new() and growing.columns.n == 3 and growing.ended
    assert growing.offset > size  # read on from where it stopped
    assert len(growing.records()) == 3
    mlf.write_bytes(header + records[0])  # the instrument starts the file anew
    with pytest.raises(InputError, match="shrank from"):
        growing.read_new()


@pytest.mark.parametrize("moment", ["first poll", "first well listed", "mid-acquisition"])
def test_a_killed_follower_resumes_to_the_same_plate(measurement, tmp_path, moment):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    playback = _start_playback(measurement, live)
    follower = _follower(live, out)
    if moment == "first poll":  # while it plans or writes the first well's units
        while not (tmp_path / ".plate.ome.zarr.zarrmill").exists() and follower.poll() is None:
            time.sleep(0.005)
    elif moment == "first well listed":
        while not _wells_listed(out) and follower.poll() is None:
            time.sleep(0.02)
    else:
        while (live / "MeasurementData.mlf").stat().st_size < 0.6 * (measurement / "MeasurementData.mlf").stat().st_size:
            time.sleep(0.02)
    assert follower.poll() is None
    os.kill(follower.pid, signal.SIGKILL)  # while the instrument goes on
    follower.wait()
    playback.join()
    again = _follower(live, out)
    assert again.wait(timeout=120) == 0, again.stderr.read()
    _same(_tree(out), _one_shot(live, tmp_path / "oneshot.ome.zarr"))


def test_a_well_reacquired_after_its_conversion_is_redone(measurement, tmp_path):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    playback = _start_playback(measurement, live, end=False)
    follower = _follower(live, out)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stderr), daemon=True)
    reader.start()
    while "B/04" not in _wells_listed(out):
        assert follower.poll() is None, lines
        time.sleep(0.02)
    playback.join()
    pixels = np.asarray(zarr.open_group(str(out / "B/03/0"), mode="r")["0"][...])
    first = sorted(live.glob("*_B03_*C01.tif"))[0]
    first.write_bytes(sorted(live.glob("*_C05_*C01.tif"))[0].read_bytes())  # the instrument images B03 again
    redo = "well B03: its files changed after it was converted; redoing it"
    deadline = time.monotonic() + 60
    while not any(redo in line for line in lines):
        assert time.monotonic() < deadline and follower.poll() is None, lines
        time.sleep(0.05)
    with open(live / "MeasurementData.mlf", "ab") as fh:
        fh.write(ROOT_END + b"\n")
    assert follower.wait(timeout=120) == 0, lines
    reader.join()
    redone = np.asarray(zarr.open_group(str(out / "B/03/0"), mode="r")["0"][...])
    assert not np.array_equal(pixels, redone)
    assert sum(redo in line for line in lines) == 1
    _same(_tree(out), _one_shot(live, tmp_path / "oneshot.ome.zarr"))


def test_a_single_file_cannot_be_followed_in_one_line(tmp_path, cli):
    image = tmp_path / "one.npy"
    np.save(image, np.zeros((4, 8, 8), np.uint16))
    code, _, err = cli("follow", "--set", f"input={image}", "--set", f"output={tmp_path / 'o.ome.zarr'}")
    assert code == 2
    assert "cannot be followed" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.ome.zarr").exists()


def _copy_wells(raw: Path, live: Path, wells: list[str], pause: float) -> None:
    """An instrument that writes a well's files at a time (MetaXpress as acquired): the files of
    each well, one by one, ``pause`` seconds apart; the other files (settings) first."""
    files = sorted(f for f in raw.rglob("*") if f.is_file() and f.name != "zarrmill-provenance.json")
    for well in [None, *wells]:
        for f in files:
            if (well is None and not any(f"_{w}_" in f.name for w in wells)) or (well and f"_{well}_" in f.name):
                target = live / f.relative_to(raw)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.read_bytes())
                if well:
                    time.sleep(pause)


def test_a_metaxpress_folder_is_followed_by_reading_it_again_and_ends_after_the_quiet_time(tmp_path):
    raw, live, out = tmp_path / "raw", tmp_path / "live", tmp_path / "plate.ome.zarr"
    run_single_task("generate-plate", {"output": str(raw), "format": "metaxpress", "wells": ["B03", "C05"],
                                       "grid": [1, 2], "shape": [48, 64], "channels": 2, "z_planes": 2}, "sync", False)
    _copy_wells(raw, live, ["B03"], 0.0)
    follower = subprocess.Popen([sys.executable, "-m", "zarrmill", "follow", "--set", f"input={live}",
                                 "--set", f"output={out}", "--set", "format=metaxpress", "--poll", "0.2",
                                 "--settle", "0.5", "--quiet", "4"], stderr=subprocess.PIPE, text=True)
    writer = threading.Thread(target=_copy_wells, args=(raw, live, ["C05"], 0.4))
    time.sleep(1.0)
    writer.start()
    listed_alone = False
    while follower.poll() is None:
        listed_alone = listed_alone or _wells_listed(out) == ["B/03"]
        time.sleep(0.05)
    writer.join()
    err = follower.stderr.read()
    assert follower.returncode == 0, err
    assert listed_alone, err  # B03 viewable while C05 was being written
    assert "nothing new for 4 s: finishing the plate" in err
    assert not check_output(out).problems
    _same(_tree(out), _one_shot(live, tmp_path / "oneshot.ome.zarr"))


def test_one_follower_per_output(measurement, tmp_path):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    play_cellvoyager(measurement, live, mb_per_s=1000.0, end=False)
    first = _follower(live, out)
    while not _wells_listed(out):
        assert first.poll() is None, first.stderr.read()
        time.sleep(0.05)
    status = subprocess.run([sys.executable, "-m", "zarrmill", "status", str(out)], capture_output=True, text=True)
    assert status.stdout.splitlines()[1].split()[:3] == ["ingest", "ingest", "following"], status.stdout
    second = _follower(live, out)
    assert second.wait(timeout=60) == 2
    err = second.stderr.read().strip().splitlines()
    assert "another zarrmill run is writing this output" in err[-1]
    with open(live / "MeasurementData.mlf", "ab") as fh:
        fh.write(ROOT_END + b"\n")
    assert first.wait(timeout=60) == 0


def test_a_workflow_with_a_follow_block_follows_its_ingest_then_runs_the_next_steps(measurement, tmp_path):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    workflow = tmp_path / "live.yaml"
    workflow.write_text(f"""name: live
follow: {{poll_seconds: 0.2, settle_seconds: 0.5, quiet_seconds: 60}}
steps:
  ingest: {{task: ingest, params: {{input: {live}, output: {out}}}}}
  pyramid: {{task: pyramid, needs: [ingest], params: {{input: {out}, min_size: 16}}}}
""")
    playback = _start_playback(measurement, live)
    run = subprocess.run([sys.executable, "-m", "zarrmill", "run", str(workflow)], capture_output=True, text=True,
                         timeout=300)
    playback.join()
    assert run.returncode == 0, run.stderr
    assert "converted and viewable" in run.stderr and "[pyramid] done" in run.stderr
    assert not check_output(out).problems
    assert "1" in zarr.open_group(str(out / "B/03/0"), mode="r")  # the pyramid ran on the finished plate


def test_follow_is_refused_where_it_cannot_apply(tmp_path, cli):
    workflow = tmp_path / "wrong.yaml"
    workflow.write_text(f"""name: wrong
follow: {{quiet_seconds: 5}}
steps:
  pyramid: {{task: pyramid, params: {{input: {tmp_path}}}}}
""")
    code, _, err = cli("validate", workflow)
    assert code == 2 and "follow is for a workflow whose first step is an ingest" in err


def _second_time_point(raw: Path, well: str) -> None:
    """``well`` imaged twice: its records again with TimePoint 2 (new files), at the mlf's end."""
    mlf = raw / "MeasurementData.mlf"
    text = mlf.read_text()
    body, end = text.rsplit("</bts:MeasurementData>", 1)
    again = []
    for line in body.splitlines():
        if f"_{well}_T0001" in line:
            name = line.split(">")[1].split("<")[0]
            (raw / name.replace("T0001", "T0002")).write_bytes((raw / name).read_bytes())
            again.append(line.replace('bts:TimePoint="1"', 'bts:TimePoint="2"').replace("T0001", "T0002"))
    mlf.write_text(body + "\n".join(again) + "\n</bts:MeasurementData>" + end)


def test_a_later_well_that_changes_the_array_layout_redoes_the_wells_converted_before(tmp_path):
    """C05, imaged last, has two time points: the plate's images get a time axis, so B03 and B04,
    converted as 4-D images while C05 was imaged, are written again as 5-D ones."""
    raw, live, out = tmp_path / "raw", tmp_path / "live", tmp_path / "plate.ome.zarr"
    run_single_task("generate-plate", {"output": str(raw), "format": "cellvoyager", "wells": WELLS, "grid": [1, 2],
                                       "shape": [48, 64], "channels": 2, "z_planes": 2, "seed": 3}, "sync", False)
    _second_time_point(raw, "C05")
    playback = _start_playback(raw, live)
    follower = _follower(live, out)
    four_d = False
    while follower.poll() is None:
        if "B/03" in _wells_listed(out):
            four_d = four_d or zarr.open_group(str(out / "B/03/0"), mode="r")["0"].ndim == 4
        time.sleep(0.05)
    playback.join()
    err = follower.stderr.read()
    assert follower.returncode == 0, err
    assert four_d, err  # listed as 4-D before C05's second time point was seen
    assert zarr.open_group(str(out / "B/03/0"), mode="r")["0"].ndim == 5
    assert not check_output(out).problems
    _same(_tree(out), _one_shot(live, tmp_path / "oneshot.ome.zarr"))


def test_a_plate_already_converted_is_already_done_when_followed(tmp_path, cli):
    raw, out = tmp_path / "raw", tmp_path / "plate.ome.zarr"
    run_single_task("generate-plate", {"output": str(raw), "format": "metaxpress", "wells": ["B03", "C05"],
                                       "grid": [1, 2], "shape": [48, 64], "channels": 1, "z_planes": 1}, "sync", False)
    run_single_task("ingest", {"input": str(raw), "output": str(out)}, "sync", False)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    code, _, err = cli("follow", "--set", f"input={raw}", "--set", f"output={out}", "--poll", "0.2", "--settle", "0.2",
                       "--quiet", "60")  # the quiet time is not waited for: the plate is as it was converted
    assert code == 0, err
    assert "[ingest] already done" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_nothing_to_follow_ends_after_the_quiet_time_in_one_line(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("follow", "--set", f"input={tmp_path / 'empty'}", "--set", f"output={tmp_path / 'o.ome.zarr'}",
                       "--set", "format=cellvoyager", "--poll", "0.1", "--quiet", "0.5")
    assert code == 2, err
    assert "nothing to convert after 0.5 s" in err.strip().splitlines()[-1]
    assert not (tmp_path / "o.ome.zarr").exists()


def test_an_instrument_that_falls_quiet_before_its_end_marker_is_a_warning(measurement, tmp_path, cli):
    live, out = tmp_path / "live", tmp_path / "plate.ome.zarr"
    play_cellvoyager(measurement, live, mb_per_s=1000.0, end=False)
    code, _, err = cli("follow", "--set", f"input={live}", "--set", f"output={out}", "--poll", "0.1",
                       "--settle", "0.2", "--quiet", "1")
    assert code == 0, err
    assert "warning" in err and "has not said the acquisition ended" in err
    assert _wells_listed(out) == ["B/03", "B/04", "C/05"]
