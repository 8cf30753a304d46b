"""Outputs for archives: zipped OME-Zarr (``.ozx``, RFC-9) written directly, read back by
zarr-python's ZipStore and ngff-zarr with pixels equal to the folder output; a killed run never
leaves a file that passes for finished and reruns to the same archive; ``.ozx`` inputs; a file
zarrmill did not write is never replaced. (OME-Zarr 0.6: tests/test_ngff06.py.)"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import ZipStore

from adversarial_world import snapshot
from conftest import _without_provenance, zarrmill_subprocess
from ngff_official import validate_store

from zarrmill.io.ngff.ozx_rules import ozx_problems

ngff_zarr = pytest.importorskip("ngff_zarr")

# the zip writer as it is; the process is killed after N entries (a kill mid-pack)
KILLED_PACK = r"""
import os, sys
from zarrmill.io.storage import zip_writer
stop_after = int(os.environ["STOP_AFTER"])
real = zip_writer.ZipWriter.add
count = [0]

def add(self, name, source):
    if count[0] == stop_after:
        os._exit(9)
    count[0] += 1
    return real(self, name, source)

zip_writer.ZipWriter.add = add
from zarrmill.runtime.front.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plate") / "raw"
    proc = zarrmill_subprocess("task", "generate-plate", "--executor", "sync", "--set", f"output={out}",
                               "--set", "wells=[B03,C04]", "--set", "grid=[2,2]", "--set", "shape=[48,56]",
                               "--set", "channels=2", "--set", "z_planes=3")
    assert proc.returncode == 0, proc.stderr
    return out


def _ingest(raw: Path, out: Path, *sets: str, script: str | None = None, env: dict | None = None):
    args = ["task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set", f"output={out}", *sets]
    if script is None:
        return zarrmill_subprocess(*args, env=env)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env)


def _field_arrays(group: zarr.Group) -> dict[str, np.ndarray]:
    """Every field image's level 0, by path, listed from the plate and well metadata."""
    out = {}
    for well in group.attrs["ome"]["plate"]["wells"]:
        for image in group[well["path"]].attrs["ome"]["well"]["images"]:
            path = f"{well['path']}/{image['path']}"
            out[path] = np.asarray(group[f"{path}/0"])
    return out


def _entries(archive: Path) -> dict[str, str]:
    """entry -> sha256 (the provenance in zarr.json left out: it records times and hosts)."""
    out = {}
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            out[info.filename] = hashlib.sha256(_without_provenance(data) if info.filename.endswith("zarr.json")
                                                else data).hexdigest()
    return out


def test_a_plate_written_as_ozx_equals_the_folder_output_and_follows_rfc9(raw, tmp_path):
    folder, archive = tmp_path / "plate.zarr", tmp_path / "plate.ozx"
    assert _ingest(raw, folder).returncode == 0
    proc = _ingest(raw, archive)
    assert proc.returncode == 0, proc.stderr
    assert archive.is_file() and sorted(p.name for p in tmp_path.iterdir()) == [
        ".plate.ozx.zarrmill", ".plate.zarr.zarrmill", "plate.ozx", "plate.zarr"]
    expected = _field_arrays(zarr.open_group(folder, mode="r"))
    # zarr-python's own zip store
    got = _field_arrays(zarr.open_group(ZipStore(archive, mode="r"), mode="r"))
    assert got.keys() == expected.keys() and all(np.array_equal(got[k], expected[k]) for k in expected)
    # ngff-zarr, an independent OME-Zarr reader that opens .ozx
    plate = ngff_zarr.from_hcs_zarr(str(archive))
    image = plate.get_well("B", "03").get_image(1)
    assert np.array_equal(np.asarray(image.images[0].data), expected["B/03/1"])
    # RFC-9, read from the archive's own records by an independent reading (zipfile)
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        assert infos[0].filename == "zarr.json" and min(infos, key=lambda i: i.header_offset) is infos[0]
        metadata = [i.filename for i in infos if i.filename.endswith("zarr.json")]
        assert [i.filename for i in infos[:len(metadata)]] == sorted(metadata, key=lambda n: (n.count("/"), n))
        assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
        assert json.loads(zf.comment.rstrip(b"\0")) == {"ome": {"version": "0.5"}} and zf.comment.endswith(b"\0")
        assert len(infos) < sum(1 for f in folder.rglob("*") if f.is_file())  # sharded: fewer entries
    assert b"PK\x06\x06" in archive.read_bytes()[-200:]  # the ZIP64 end of central directory record
    assert ozx_problems(archive) == []
    check = zarrmill_subprocess("check", archive)
    assert check.returncode == 0 and "ok (plate" in check.stdout, check.stdout + check.stderr
    # what is left beside it: bookkeeping, no second copy of the chunks
    left = [p for p in (tmp_path / ".plate.ozx.zarrmill").rglob("*") if p.is_file() and "/c/" in str(p)]
    assert left == []


def test_a_volume_written_as_ozx_equals_the_folder_output(tmp_path):
    image = tmp_path / "vol.zarr"
    assert zarrmill_subprocess("task", "generate", "--executor", "sync", "--set", f"output={image}",
                               "--set", "shape=[40,96,80]", "--set", "axes=zyx", "--set", "chunks=[16,32,32]").returncode == 0
    for out in ("re.zarr", "re.ozx"):
        proc = zarrmill_subprocess("task", "rechunk", "--executor", "sync", "--set", f"input={image}",
                                   "--set", f"output={tmp_path / out}", "--set", "chunks=[8,32,32]",
                                   "--set", "shards=[40,96,96]")
        assert proc.returncode == 0, proc.stderr
    want = np.asarray(zarr.open_array(tmp_path / "re.zarr" / "0", mode="r"))
    assert np.array_equal(want, np.asarray(zarr.open_array(image / "0", mode="r")))
    got = zarr.open_array(ZipStore(tmp_path / "re.ozx", mode="r"), path="0", mode="r")
    assert np.array_equal(np.asarray(got), want)
    ms = ngff_zarr.from_ngff_zarr(str(tmp_path / "re.ozx"))
    assert np.array_equal(np.asarray(ms.images[0].data), want)
    assert ozx_problems(tmp_path / "re.ozx") == []
    with zipfile.ZipFile(tmp_path / "re.ozx") as zf:
        assert [i.filename for i in zf.infolist()] == ["zarr.json", "0/zarr.json", "0/c/0/0/0"]  # one shard


@pytest.mark.parametrize("stop_after", [0, 7])
def test_a_killed_pack_leaves_no_finished_file_and_reruns_to_the_same_archive(raw, tmp_path, stop_after):
    clean = tmp_path / "clean.ozx"
    assert _ingest(raw, clean).returncode == 0
    archive = tmp_path / "plate.ozx"
    killed = _ingest(raw, archive, script=KILLED_PACK, env={**os.environ, "STOP_AFTER": str(stop_after)})
    assert killed.returncode == 9, killed.stderr
    assert not archive.exists(), "a killed run left a file where the archive goes"
    check = zarrmill_subprocess("check", archive)
    assert check.returncode != 0
    rerun = _ingest(raw, archive)
    assert rerun.returncode == 0, rerun.stderr
    assert "already done" in rerun.stderr  # the units were done: only the packing went on
    assert _entries(archive) == _entries(clean)
    assert list(_entries(archive)) == list(_entries(clean))  # same order, too
    assert ozx_problems(archive) == [] and zarrmill_subprocess("check", archive).returncode == 0


def test_a_run_killed_in_its_units_leaves_no_archive_and_resumes(raw, tmp_path):
    from test_full_size_plates import KILLED_RUN

    archive = tmp_path / "plate.ozx"
    killed = _ingest(raw, archive, script=KILLED_RUN, env={**os.environ, "STOP_AFTER": "3"})
    assert killed.returncode == 9, killed.stderr
    assert not archive.exists()
    rerun = _ingest(raw, archive)
    assert rerun.returncode == 0, rerun.stderr
    clean = tmp_path / "clean.ozx"
    assert _ingest(raw, clean).returncode == 0
    assert _entries(archive) == _entries(clean)


def test_a_file_zarrmill_did_not_write_is_never_replaced(raw, tmp_path):
    archive = tmp_path / "plate.ozx"
    with zipfile.ZipFile(archive, "w") as zf:  # someone's own zip, by that name
        zf.writestr("zarr.json", json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    before = snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):
        proc = _ingest(raw, archive, *extra)
        assert proc.returncode == 2 and "never replaced" in proc.stderr and "Traceback" not in proc.stderr
        assert snapshot(tmp_path) == before
    # a zip that names another store's owner (copied from elsewhere) is not this one's either
    other = tmp_path / "other.ozx"
    assert _ingest(raw, other).returncode == 0
    os.replace(other, archive)
    before = snapshot(tmp_path)
    proc = _ingest(raw, archive, "--overwrite")
    assert proc.returncode == 2 and "never replaced" in proc.stderr
    assert snapshot(tmp_path) == before


def test_a_rerun_after_the_archive_was_removed_makes_it_again(raw, tmp_path):
    archive = tmp_path / "plate.ozx"
    assert _ingest(raw, archive).returncode == 0
    first = _entries(archive)
    archive.unlink()
    proc = _ingest(raw, archive)
    assert proc.returncode == 0, proc.stderr
    assert _entries(archive) == first


def test_ozx_inputs_are_read_in_place(raw, tmp_path):
    folder, archive = tmp_path / "plate.zarr", tmp_path / "plate.ozx"
    assert _ingest(raw, folder).returncode == 0 and _ingest(raw, archive).returncode == 0
    outs = {}
    for name, src in (("from_folder", folder), ("from_archive", archive)):
        out = tmp_path / f"{name}.zarr"
        proc = zarrmill_subprocess("task", "reshard", "--executor", "sync", "--set", f"input={src}",
                                   "--set", f"output={out}")
        assert proc.returncode == 0, proc.stderr
        outs[name] = out
    a, b = (zarr.open_group(outs[k], mode="r") for k in ("from_folder", "from_archive"))
    for well in ("B/03", "C/04"):
        assert np.array_equal(np.asarray(a[f"{well}/well/0"]), np.asarray(b[f"{well}/well/0"]))
    validate_store(outs["from_archive"])
    # one image inside the archive, as a path through it
    one = tmp_path / "one.ozx"
    proc = zarrmill_subprocess("task", "rechunk", "--executor", "sync", "--set", f"input={archive}/B/03/0",
                               "--set", f"output={one}", "--set", "chunks=[1,1,48,56]")
    assert proc.returncode == 0, proc.stderr
    got = zarr.open_array(ZipStore(one, mode="r"), path="0", mode="r")
    assert np.array_equal(np.asarray(got), np.asarray(zarr.open_array(folder / "B/03/0/0", mode="r")))
    for src in (archive, f"{archive}/B/03/0"):  # an archive never replaces itself while it is read
        proc = zarrmill_subprocess("task", "rechunk", "--executor", "sync", "--set", f"input={src}",
                                   "--set", f"output={archive}")
        assert proc.returncode == 2 and "is (or holds) the input" in proc.stderr, proc.stderr
    # a step that adds to its input cannot add to a zip: one line, nothing written
    before = snapshot(tmp_path)
    proc = zarrmill_subprocess("task", "pyramid", "--executor", "sync", "--set", f"input={archive}")
    assert proc.returncode == 2 and "written once" in proc.stderr and "Traceback" not in proc.stderr
    proc = _ingest(tmp_path / "raw-not-read", "s3://some-bucket/plate.ozx")  # refused before anything is read
    assert proc.returncode == 2 and "written to a local path" in proc.stderr
    assert snapshot(tmp_path) == before


def test_an_archive_input_that_changed_is_seen(raw, tmp_path):
    archive = tmp_path / "plate.ozx"
    assert _ingest(raw, archive).returncode == 0
    out = tmp_path / "well.zarr"
    args = ("task", "reshard", "--executor", "sync", "--set", f"input={archive}", "--set", f"output={out}")
    assert zarrmill_subprocess(*args).returncode == 0
    assert "already done" in zarrmill_subprocess(*args).stderr
    os.utime(archive, ns=(archive.stat().st_atime_ns, archive.stat().st_mtime_ns + 10**9))
    again = zarrmill_subprocess(*args)
    assert again.returncode == 0 and "inputs changed" in again.stderr, again.stderr


def test_a_rerun_with_other_parameters_replaces_the_archive_never_serving_the_old_one(raw, tmp_path):
    archive = tmp_path / "plate.ozx"
    assert _ingest(raw, archive).returncode == 0
    refused = _ingest(raw, archive, "--set", "chunk_yx=[24,28]")
    assert refused.returncode == 2 and "--overwrite" in refused.stderr
    proc = _ingest(raw, archive, "--set", "chunk_yx=[24,28]", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    got = zarr.open_array(ZipStore(archive, mode="r"), path="B/03/0/0", mode="r")
    assert got.chunks[-2:] == (24, 28)
    clean = tmp_path / "clean.ozx"
    assert _ingest(raw, clean, "--set", "chunk_yx=[24,28]").returncode == 0
    assert _entries(archive) == _entries(clean)


def test_removing_packed_files_goes_through_the_guard(tmp_path):
    """The pack deletes files in batches (OutputGuard.remove_files): inside the store it claimed, yes;
    a folder outside it, or a file in a store zarrmill did not create, never."""
    from zarrmill.errors import OutputExistsError, UnsafeOutputError
    from zarrmill.io.storage.guard import open_guard

    store = tmp_path / "store.zarr"
    guard = open_guard(store)
    guard.claim("pack")
    (store / "a").mkdir()
    ours = [store / "a" / "0", store / "a" / "1"]
    for f in ours:
        f.write_bytes(b"x")
    outside = tmp_path / "theirs.txt"
    outside.write_text("not zarrmill's")
    before = snapshot(tmp_path)
    with pytest.raises((OutputExistsError, UnsafeOutputError)):
        guard.remove_files([outside])
    with pytest.raises((OutputExistsError, UnsafeOutputError)):
        guard.remove_files([store / "a" / ".." / ".." / "theirs.txt"])
    assert snapshot(tmp_path) == before
    guard.remove_files(ours)
    assert not any(f.exists() for f in ours) and outside.exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.bin").write_bytes(b"y")
    other = open_guard(foreign, in_place=True)
    with pytest.raises((OutputExistsError, UnsafeOutputError)):
        other.remove_files([foreign / "data.bin"])
    assert (foreign / "data.bin").exists()


def test_a_file_put_at_the_target_while_packing_is_never_replaced(raw, tmp_path):
    """The target is checked again when the complete archive is renamed onto it: a file that
    appeared there since the run began (here: during the pack) stays, and the run fails in one line."""
    archive = tmp_path / "plate.ozx"
    planting = KILLED_PACK.replace("    if count[0] == stop_after:\n        os._exit(9)\n",
                                   "    if count[0] == stop_after:\n        open(os.environ['PLANT'], 'w').write('theirs')\n")
    proc = _ingest(raw, archive, script=planting, env={**os.environ, "STOP_AFTER": "3", "PLANT": str(archive)})
    assert proc.returncode == 2 and "never replaced" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert archive.read_text() == "theirs"


def test_only_empty_folders_are_removed_as_folders(tmp_path):
    from zarrmill.io.storage.paths import remove_empty_folder

    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "keep.txt").write_text("not zarrmill's")
    assert remove_empty_folder(empty) is True
    assert not empty.exists()
    assert remove_empty_folder(full) is False  # rmdir refused: it holds a file
    assert (full / "keep.txt").read_text() == "not zarrmill's"
