"""Full-size plates (issue 40): the mlf read in chunks equals the element-by-element read, a resume
reads its plan from the ledger only when nothing changed, and ``--dry-run`` sizes a plate as its
real run turns out (units exact, bytes within 10 %)."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import zarrmill_subprocess

from zarrmill.errors import InputError
from zarrmill.io.storage.guard import bookkeeping_dir
from zarrmill.io.readers import mlf

# the engine as it is; the runner stops the process after N units (a kill mid-step)
KILLED_RUN = r"""
import os, sys
from zarrmill.runtime.core import ledger
from zarrmill.runtime.execution import unit_runners
stop_after = int(os.environ["STOP_AFTER"])
ledger.FLUSH_EVERY_S = 0.0  # every unit recorded as it is done
real = unit_runners.run_inline

def stopping(task, params, todo, client, opts):
    for n, result in enumerate(real(task, params, todo, client, opts)):
        if n == stop_after:
            os._exit(9)
        yield result

unit_runners.run_inline = stopping
from zarrmill.runtime.front.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _plate(tmp_path: Path, *sets: str) -> Path:
    raw = tmp_path / "raw"
    proc = zarrmill_subprocess("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                               "--set", "wells=[B03,B04]", "--set", "grid=[2,2]", "--set", "shape=[64,80]",
                               "--set", "channels=2", "--set", "z_planes=3", *sets)
    assert proc.returncode == 0, proc.stderr
    return raw


def _columns_equal(a: mlf.MlfColumns, b: mlf.MlfColumns) -> None:
    for name in mlf.COLUMNS:
        if name != "times":
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.errors == b.errors


def test_the_chunked_mlf_read_equals_the_element_read_whatever_the_chunks_hold(tmp_path, monkeypatch):
    raw = _plate(tmp_path)
    path = raw / "MeasurementData.mlf"
    text = path.read_text()
    records = re.findall(r"<bts:MeasurementRecord .*?</bts:MeasurementRecord>", text)
    # a chunk the fast path cannot take: an ERR record, and a file in a sub-folder
    err = ('<bts:MeasurementRecord bts:Type="ERR" bts:Time="2024-05-01T10:01:01.000+00:00" bts:Column="3" '
           'bts:Row="2" bts:TimePoint="1" bts:FieldIndex="2">Autofocus failed</bts:MeasurementRecord>')
    moved = records[7].replace(">synthetic", ">sub/synthetic")
    (raw / "sub").mkdir()
    edited = text.replace(records[5], records[5] + "\n" + err).replace(records[7], moved)
    path.write_text(edited)
    monkeypatch.setattr(mlf, "CHUNK", 2048)  # many chunks: most fast, two not
    fast = mlf.read_mlf(path, raw)
    slow = mlf._columns_of(mlf.parse_mlf(path, errors := []), raw.resolve(), path, errors)
    _columns_equal(fast, slow)
    assert fast.errors and "Autofocus failed" in fast.errors[0]
    assert b"sub/" + records[7].split(">")[1].split("<")[0].encode() in fast.names.tolist()
    assert len(fast) == len(records)


def _last(attr: str, value: str):
    """Replace the value of the last record's ``attr`` (a late chunk)."""
    def damage(text: str) -> str:
        at = text.rindex(f'bts:{attr}="') + len(f'bts:{attr}="')
        return text[:at] + value + text[text.index('"', at):]
    return damage


def test_an_err_record_first_still_gives_the_fast_layout(tmp_path, monkeypatch):
    raw = _plate(tmp_path)
    path = raw / "MeasurementData.mlf"
    text = path.read_text()
    first = text.index("<bts:MeasurementRecord ")
    err = ('<bts:MeasurementRecord bts:Type="ERR" bts:Time="2024-05-01T10:01:01.000+00:00" bts:Column="3" '
           'bts:Row="2" bts:TimePoint="1" bts:FieldIndex="1">Autofocus failed</bts:MeasurementRecord>\n')
    path.write_text(text[:first] + err + text[first:])
    layout, _ = mlf._record_pattern(path.read_bytes()[:1 << 16])
    assert layout is not None and "X" in layout.names  # the first IMG record's layout
    fast = mlf.read_mlf(path, raw)
    _columns_equal(fast, mlf._columns_of(mlf.parse_mlf(path, errors := []), raw.resolve(), path, errors))
    assert len(fast.errors) == 1


@pytest.mark.parametrize("damage, said", [
    (_last("Row", "y"), "bts:Row='y' in <bts:MeasurementRecord> is not a whole number"),
    (_last("X", "nan"), "bts:X='nan' in <bts:MeasurementRecord> must be a finite number"),
    (_last("Time", "yesterday"), "bts:Time='yesterday' is not an ISO date"),
    (lambda t: t[:-40], "not valid XML"),
])
def test_a_bad_value_in_a_late_chunk_is_the_element_reads_one_line(tmp_path, monkeypatch, damage, said):
    raw = _plate(tmp_path)
    path = raw / "MeasurementData.mlf"
    path.write_text(damage(path.read_text()))
    monkeypatch.setattr(mlf, "CHUNK", 4096)
    with pytest.raises(InputError, match=re.escape(said)) as fast:
        mlf.read_mlf(path, raw)
    with pytest.raises(InputError) as slow:
        mlf.parse_mlf(path)
    assert str(fast.value) == str(slow.value)


def _killed(raw: Path, out: Path, stop_after: int) -> None:
    proc = __import__("subprocess").run(
        [sys.executable, "-c", KILLED_RUN, "task", "ingest", "--executor", "sync", "--set", f"input={raw}",
         "--set", f"output={out}", "--set", "layout=well", "--set", "volume_mb=0.01"],
        capture_output=True, text=True, env={**os.environ, "STOP_AFTER": str(stop_after)})
    assert proc.returncode == 9, proc.stderr


def _ingest(raw: Path, out: Path, *sets: str):
    return zarrmill_subprocess("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set",
                               f"output={out}", "--set", "layout=well", "--set", "volume_mb=0.01", *sets)


def _pixels(out: Path) -> dict[str, np.ndarray]:
    root = zarr.open_group(out, mode="r")
    return {f"{w}": np.asarray(root[f"{w}/well/0"]) for w in ("B/03", "B/04")}


def test_a_resume_reads_its_plan_from_the_ledger_and_writes_what_a_clean_run_writes(tmp_path):
    raw = _plate(tmp_path)
    clean = _ingest(raw, tmp_path / "clean.zarr")
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "out.zarr"
    _killed(raw, out, stop_after=1)
    assert list(bookkeeping_dir(out).rglob("plan.bin")), "no plan saved with the ledger"
    resumed = _ingest(raw, out)
    assert resumed.returncode == 0, resumed.stderr
    assert "plan read from the ledger" in resumed.stderr
    assert re.search(r"units, [1-9]\d* already done", resumed.stderr), resumed.stderr
    for well, data in _pixels(tmp_path / "clean.zarr").items():
        np.testing.assert_array_equal(_pixels(out)[well], data)


def test_a_saved_plan_is_refused_when_an_input_file_changed(tmp_path):
    raw = _plate(tmp_path)
    out = tmp_path / "out.zarr"
    _killed(raw, out, stop_after=1)
    tif = sorted(raw.glob("*.tif"))[0]
    tif.write_bytes(tif.read_bytes())  # rewritten: a new modification time
    os.utime(tif, ns=(tif.stat().st_atime_ns, tif.stat().st_mtime_ns + 10**9))
    again = _ingest(raw, out)
    assert again.returncode == 0, again.stderr
    assert "plan read from the ledger" not in again.stderr
    assert "inputs changed" in again.stderr


def test_a_saved_plan_is_refused_for_other_parameters_or_another_key(tmp_path):
    from zarrmill.io.readers import saved
    from zarrmill.io.readers.cellvoyager import read_cellvoyager

    raw = _plate(tmp_path)
    acq = read_cellvoyager(raw)
    data = saved.dump(acq, "key-1")
    back = saved.load(data, "key-1")
    assert back is not None and back.planes[5] == acq.planes[5] and back.channels == acq.channels
    assert saved.load(data, "key-2") is None  # another task version, parameter or input fingerprint
    out = tmp_path / "out.zarr"
    _killed(raw, out, stop_after=1)
    other = _ingest(raw, out, "--set", "channel_names=[a,b]", "--overwrite")
    assert other.returncode == 0, other.stderr
    assert "plan read from the ledger" not in other.stderr


def test_dry_run_sizes_a_plate_as_its_real_run_turns_out(tmp_path):
    raw = _plate(tmp_path)
    out = tmp_path / "plate.zarr"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: sized\nexecutor: {{kind: sync}}\nsteps:\n  ingest:\n    task: ingest\n    params: "
                  f"{{input: {raw}, output: {out}, layout: well, volume_mb: 0.01}}\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    dry = zarrmill_subprocess("run", wf, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a dry run wrote next to its output"
    (size,) = json.loads(dry.stdout)
    real = zarrmill_subprocess("run", wf)
    assert real.returncode == 0, real.stderr
    units = int(re.search(r"task ingest: (\d+) units", real.stderr).group(1))
    assert size["units"] == units
    written = float(re.search(r"done: \d+ units run, \d+ skipped, ([\d.]+) MB", real.stderr).group(1)) * 1e6
    assert abs(size["output_bytes"] - written) <= 0.1 * written, (size, written)
    on_disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file() and "zarr.json" not in f.name
                  and ".zarrmill" not in str(f) and "tables" not in str(f))
    assert abs(size["disk_bytes"] - on_disk) <= 0.1 * on_disk, (size["disk_bytes"], on_disk)
    assert size["unit_memory"] > 0 and size["worker_hours"] > 0


def test_dry_run_of_a_plate_with_missing_files_sizes_it_and_fails_as_the_run_would(tmp_path):
    raw = _plate(tmp_path)
    sorted(raw.glob("*.tif"))[0].unlink()
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: sized\nsteps:\n  ingest:\n    task: ingest\n    params: "
                  f"{{input: {raw}, output: {tmp_path / 'p.zarr'}, layout: well}}\n")
    dry = zarrmill_subprocess("run", wf, "--dry-run")
    assert dry.returncode == 2
    assert re.search(r"ingest\s+ingest\s+\d+", dry.stdout), dry.stdout
    assert "1 listed files are missing" in dry.stderr and "Traceback" not in dry.stderr
    assert not (tmp_path / "p.zarr").exists()
    alone = zarrmill_subprocess("run", wf, "--json")  # --json belongs to --dry-run: nothing runs
    assert alone.returncode == 2 and "use it with --dry-run" in alone.stderr
    assert not (tmp_path / "p.zarr").exists()


def test_a_folder_of_many_images_is_one_fingerprint_entry_that_still_sees_each_file(tmp_path, monkeypatch):
    from zarrmill.io.storage import fingerprint as fp

    monkeypatch.setattr(fp, "LISTED_UP_TO", 3)
    raw = _plate(tmp_path)
    first = fp.fingerprint([raw])
    assert "raw/*" in first and "raw/MeasurementData.mlf" in first  # metadata files stay one by one
    assert not any(k.endswith(".tif") for k in first)
    tif = sorted(raw.glob("*.tif"))[3]
    os.utime(tif, ns=(tif.stat().st_atime_ns, tif.stat().st_mtime_ns + 10**9))
    assert fp.changed_files(first, fp.fingerprint([raw])) == ["raw/*"]
    assert "files in raw/" in fp.describe_changes(["raw/*"])
    second = fp.fingerprint([raw])
    (raw / "extra_T0001F001L01A01Z01C01.tif").write_bytes(b"x")
    assert fp.changed_files(second, fp.fingerprint([raw])) == ["raw/*"]


def _two_step_workflow(tmp_path: Path) -> Path:
    """ingest, then pyramid in place: a dry run plans the second on a copy of the first's scratch."""
    raw = _plate(tmp_path)
    out = tmp_path / "plate.zarr"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: sized\nexecutor: {{kind: sync}}\nsteps:\n  ingest:\n    task: ingest\n    params: "
                  f"{{input: {raw}, output: {out}}}\n  pyr:\n    task: pyramid\n"
                  f"    needs: [ingest]\n    params: {{input: {out}, levels: 2, min_size: 1}}\n")
    return wf


def test_a_dry_run_of_a_finished_workflow_with_relative_paths_sizes_every_step(tmp_path):
    """The demo's case: outputs spelt ``./out/...``, the run finished. The in-place step is planned on
    the earlier step's scratch output (however the path is spelt), never on the finished store,
    whose levels would stop its plan."""
    _plate(tmp_path)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: sized\nexecutor: {kind: sync}\nsteps:\n  ingest:\n    task: ingest\n    params: "
                  "{input: ./raw, output: ./out/plate.zarr}\n  pyr:\n    task: pyramid\n"
                  "    needs: [ingest]\n    params: {input: ./out/plate.zarr, levels: 2, min_size: 1}\n")
    done = zarrmill_subprocess("run", wf, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    dry = zarrmill_subprocess("run", wf, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "pyr: input is made by step ingest" in dry.stdout, dry.stdout
    assert "already has" not in dry.stderr + dry.stdout


def test_a_dry_run_leaves_the_temporary_folder_as_it_was(tmp_path, monkeypatch):
    wf = _two_step_workflow(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dry = zarrmill_subprocess("run", wf, "--dry-run", env={**os.environ, "TMPDIR": str(tmp)})
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"pyr\s+pyramid\s+\d+", dry.stdout), dry.stdout
    assert list(tmp.iterdir()) == [], list(tmp.rglob("*"))[:5]


def test_a_file_someone_else_put_in_the_dry_runs_scratch_folder_survives(tmp_path, monkeypatch, capsys):
    from zarrmill.runtime.execution import sizing
    from zarrmill.runtime.execution.workflow import load_workflow

    wf = load_workflow(_two_step_workflow(tmp_path))
    monkeypatch.setattr(sizing.tempfile, "tempdir", str(tmp_path))
    planted: list[Path] = []
    size_step = sizing._size_step

    def planting(step, scratch, *args, **kwargs):
        size = size_step(step, scratch, *args, **kwargs)
        planted.append(scratch / "theirs.txt")  # beside the scratch output, as another user might
        planted[-1].write_text("not zarrmill's")
        return size

    monkeypatch.setattr(sizing, "_size_step", planting)
    sizes = sizing.size_workflow(wf)
    assert [s.units for s in sizes] and all(s.units for s in sizes), sizes
    assert all(p.read_text() == "not zarrmill's" for p in planted) and len(planted) == 2
    assert not list(tmp_path.glob("zarrmill-dry-run-*/*/out")), "the scratch outputs are removed"
    assert "not empty after the dry run" in capsys.readouterr().err
