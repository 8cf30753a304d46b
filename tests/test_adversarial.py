"""Adversarial inputs against the safety rules (docs/how-to/resume-and-safety.md).

Every case runs in a copy of a small world of a user's files (tests/adversarial_world.py) from its
``cwd`` folder, with HOME pointing at its ``home``, and snapshots the whole world before and after:
exit code, one line on stderr without a traceback, inputs byte-identical, nothing changed outside
the output, and no output left behind that ``zarrmill check`` passes."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from adversarial_world import build_world, changes, copy_world, set_json, snapshot
from conftest import bookkeeping, done_units, forget_ownership, zarrmill_subprocess

from zarrmill.io.ngff.conformance import check_store
from zarrmill.runtime.front.check import check_output

# task -> parameters besides output (paths relative to the world's cwd)
TASKS: dict[str, list[str]] = {
    "rechunk": ["input=../in/img.zarr", "chunks=[1,4,8,8]"],
    "generate": ["shape=[1,8,32,32]", "axes=czyx", "chunks=[1,4,16,16]", "n_blobs=2"],
    "ingest": ["input=../in/raw"],
    "generate-plate": ["wells=[B03]", "grid=[1,1]", "shape=[32,32]", "channels=1"],
    "compress": ["input=../in/case.npy", "patch=[8,16,16]", "format=zarr", "codec=lz4"],
    "patch-extract": ["input=../in/img.zarr", "points=../in/points.csv", "cuboid=[2,8,8]"],
}
INPUT_OF = {"rechunk": "../in/img.zarr", "ingest": "../in/raw", "compress": "../in/case.npy",
            "patch-extract": "../in/img.zarr"}

# (case id, output as the user typed it; {home}/{world} filled in per case). The real "/" is never
# handed to a run here: a regression would delete the machine's files (it did, once, while the guard
# was switched off to prove these tests fail without it). test_root_is_refused_by_the_guard_itself
# checks "/" on the guard, whose checks only read.
BAD_OUTPUTS = [
    ("cwd-dot", "."), ("cwd-slash", "./"), ("cwd-abs", "{world}/cwd"), ("cwd-respelled", "../cwd"),
    ("parent-of-cwd", ".."), ("ancestor-of-cwd", "{world}/.."), ("home", "{home}"),
    ("home-respelled", "{home}/../home"), ("existing-file", "../afile.txt"),
    ("foreign-folder", "../precious"), ("foreign-store", "../foreign.zarr"), ("symlink-loop", "../loop"),
    ("through-loop", "../loop/out.zarr"), ("link-to-foreign", "link_out"), ("in-folder", "../in"),
]
INPUT_RELATIVE = [("is-input", "{input}"), ("inside-input", "{input}/sub.zarr"), ("inputs-parent", "{input}/..")]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_world(tmp_path_factory.mktemp("template") / "world")


@pytest.fixture
def world(template, tmp_path, monkeypatch) -> Path:
    w = copy_world(template, tmp_path / "world")
    monkeypatch.chdir(w / "cwd")
    monkeypatch.setenv("HOME", str(w / "home"))
    return w


def run_task(cli, task: str, output: str, *extra: str, params: list[str] | None = None):
    args = ["task", task, "--executor", "sync", "--set", f"output={output}"]
    for s in (TASKS[task] if params is None else params):
        args += ["--set", s]
    return cli(*args, *extra)


def assert_refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("zarrmill: error: "), err
    for word in words:
        assert word in lines[0], lines[0]


def assert_nothing_passes_check(path: Path, existed: bool) -> None:
    """A run that failed must not leave a new store that check calls good."""
    if existed or not path.exists():
        return
    problems = check_output(path).problems
    assert problems, f"{path}: left behind and check passes"


def _cases():
    for task in TASKS:
        outputs = BAD_OUTPUTS + (INPUT_RELATIVE if task in INPUT_OF else [])
        for case, output in outputs:
            for overwrite in (False, True):
                yield pytest.param(task, output, overwrite, id=f"{task}-{case}{'-overwrite' if overwrite else ''}")


@pytest.mark.parametrize("task,output,overwrite", list(_cases()))
def test_unsafe_output_is_refused_and_nothing_changes(cli, world, task, output, overwrite):
    output = output.format(world=world, home=world / "home", input=INPUT_OF.get(task, ""))
    before = snapshot(world)
    code, _, err = run_task(cli, task, output, *(["--overwrite"] if overwrite else []))
    assert_refused(code, err)
    assert changes(before, snapshot(world)) == []


def test_root_is_refused_by_the_guard_itself():
    from zarrmill.errors import UnsafeOutputError
    from zarrmill.io.storage.guard import OutputGuard

    for root in ("/", "/.", "//"):
        with pytest.raises(UnsafeOutputError, match="refusing to write here"):
            OutputGuard(root).check()
        with pytest.raises(UnsafeOutputError, match="refusing to delete or empty"):
            OutputGuard(root).clear()  # even if someone planted an owner marker there


def test_deletion_refuses_the_current_folder_and_home_even_when_owned(world):
    from zarrmill.errors import UnsafeOutputError
    from zarrmill.io.storage.guard import OutputGuard

    for folder in (world / "cwd", world / "home", world):
        marker = bookkeeping(folder)
        marker.mkdir(exist_ok=True)
        # a planted marker, and a claim in the folder that names it: the folder counts as owned
        marker.joinpath("owner.json").write_text(json.dumps({"tool": "zarrmill", "id": "x"}))
        folder.joinpath(".zarrmill-claim").write_text(json.dumps({"id": "x"}))
        assert OutputGuard(folder).owned()
        before = snapshot(world)
        with pytest.raises(UnsafeOutputError):
            OutputGuard(folder).clear()
        with pytest.raises(UnsafeOutputError):
            OutputGuard(folder.parent).remove(folder)
        assert changes(before, snapshot(world)) == []


# -- paths from metadata and names ----------------------------------------------------------------
def _image_dataset_path(world: Path, path: str) -> None:
    set_json(world / "in" / "img.zarr" / "zarr.json",
             lambda d: d["attributes"]["ome"]["multiscales"][0]["datasets"][0].__setitem__("path", path))


def _plate_well_path(world: Path, path: str) -> None:
    set_json(world / "in" / "plate.zarr" / "zarr.json",
             lambda d: d["attributes"]["ome"]["plate"]["wells"][0].__setitem__("path", path))


def _well_image_path(world: Path, path: str) -> None:
    set_json(world / "in" / "plate.zarr" / "B" / "03" / "zarr.json",
             lambda d: d["attributes"]["ome"]["well"]["images"][0].__setitem__("path", path))


def _mlf_file(world: Path, path: str) -> None:
    mlf = world / "in" / "raw" / "MeasurementData.mlf"
    text = mlf.read_text()
    first = text.split(">", 1)[1]
    name = next(part.split("<")[0] for part in text.split(">") if part.split("<")[0].endswith(".tif"))
    mlf.write_text(text.replace(f">{name}<", f">{path}<", 1))
    assert first


# "ABS:x" is the absolute path of x inside the test's world: an absolute path in metadata, yet never
# a folder of the machine itself (a test never hands /etc or / to a writing task)
TRAVERSALS = ["../../precious", "../../../precious/sub", "ABS:precious", "a/../../..", "..", ""]
METADATA_CASES = (
    [("image-dataset", _image_dataset_path, t, task, params) for t in TRAVERSALS
     for task, params in (("rechunk", ["input=../in/img.zarr", "output=out.zarr"]),
                          ("pyramid", ["input=../in/img.zarr"]),
                          ("patch-extract", ["input=../in/img.zarr", "output=out.zarr",
                                             "points=../in/points.csv", "cuboid=[2,8,8]"]))]
    + [("plate-well", _plate_well_path, t, task, params) for t in TRAVERSALS[:4]
       for task, params in (("pyramid", ["input=../in/plate.zarr"]),
                            ("reshard", ["input=../in/plate.zarr", "output=wells.zarr"]))]
    + [("well-image", _well_image_path, t, task, params) for t in TRAVERSALS[:4]
       for task, params in (("pyramid", ["input=../in/plate.zarr"]),
                            ("reshard", ["input=../in/plate.zarr", "output=wells.zarr"]),
                            ("reshard", ["input=../in/plate.zarr"]))]
    + [("mlf-file", _mlf_file, t, "ingest", ["input=../in/raw", "output=plate.zarr"])
       for t in ("../../precious/data.bin", "ABS:precious/data.bin", "sub/../../x.tif", "..")]
)


@pytest.mark.parametrize("kind,edit,path,task,params", METADATA_CASES,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(METADATA_CASES)])
def test_paths_in_metadata_never_leave_their_store(cli, world, kind, edit, path, task, params):
    if path.startswith("ABS:"):
        path = str(world / path[4:])
    edit(world, path)
    before = snapshot(world)
    args = ["task", task, "--executor", "sync"]
    for s in params:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert_refused(code, err)
    assert changes(before, snapshot(world)) == []


@pytest.mark.parametrize("name", ["../evil", "a/b", "", ".hidden", "x\ny"])
def test_generate_plate_names_stay_file_names(cli, world, name):
    before = snapshot(world)
    code, _, err = run_task(cli, "generate-plate", "raw2", params=TASKS["generate-plate"] + [f"plate={name}"])
    assert_refused(code, err, "plate")
    assert changes(before, snapshot(world)) == []


# -- symlinks ------------------------------------------------------------------------------------
def test_a_link_planted_inside_an_owned_output_is_never_followed_to_delete(cli, world):
    assert run_task(cli, "rechunk", "out.zarr")[0] == 0
    shutil.rmtree(world / "cwd" / "out.zarr" / "0")
    os.symlink(world / "precious", world / "cwd" / "out.zarr" / "0")
    before = snapshot(world)
    code, _, err = run_task(cli, "rechunk", "out.zarr", "--overwrite",
                            params=["input=../in/img.zarr", "chunks=[1,2,8,8]"])
    assert code == 2 and "Traceback" not in err, err
    after = snapshot(world)
    assert [c for c in changes(before, after) if not c.startswith("cwd/out.zarr")] == []
    assert (world / "precious" / "sub" / "a.txt").read_text() == "irreplaceable\n"


def test_output_through_a_link_writes_only_the_new_folder_it_names(cli, world):
    before = snapshot(world)
    code, _, err = run_task(cli, "rechunk", "link_out/new.zarr")
    assert code == 0, err
    changed = changes(before, snapshot(world))
    # the store, and its bookkeeping beside it
    assert changed and all(c.startswith(("precious/new.zarr", "precious/.new.zarr.zarrmill")) for c in changed), changed


# -- failed plans, changed inputs -----------------------------------------------------------------
@pytest.mark.parametrize("task,params", [
    ("rechunk", ["input=../in/img.zarr", "chunks=[1,4,8]"]),
    ("rechunk", ["input=../in/nothing.zarr"]),
    ("rechunk", ["input=../in/case.npy"]),
    ("ingest", ["input=../in/img.zarr"]),
    ("compress", ["input=../in/case.npy", "patch=[8,16,16,16,16]", "format=zarr"]),
    ("patch-extract", ["input=../in/img.zarr", "points=../in/nothing.csv", "cuboid=[2,8,8]"]),
    ("patch-extract", ["input=../in/img.zarr", "points=../afile.txt", "cuboid=[2,8,8]"]),
], ids=["rechunk-chunks-length", "rechunk-missing-input", "rechunk-npy-input", "ingest-not-a-plate",
        "compress-patch-dims", "patch-missing-points", "patch-bad-points"])
def test_a_failed_plan_leaves_the_file_system_as_it_was(cli, world, task, params):
    before = snapshot(world)
    code, _, err = run_task(cli, task, "out.zarr", params=params)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert changes(before, snapshot(world)) == []


def test_missing_tiff_fails_cleanly_then_a_rerun_completes(cli, world):
    raw = world / "in" / "raw"
    victim = sorted(raw.glob("*.tif"))[0]
    saved = victim.read_bytes()
    victim.unlink()
    before = snapshot(world)
    code, _, err = run_task(cli, "ingest", "plate.zarr")
    assert code in (1, 2) and "Traceback" not in err, err
    assert victim.name in err
    assert_nothing_passes_check(world / "cwd" / "plate.zarr", existed=False)
    assert [c for c in changes(before, snapshot(world)) if not c.startswith("cwd/plate.zarr")] == []
    victim.write_bytes(saved)
    code, _, err = run_task(cli, "ingest", "plate.zarr")
    assert code == 0, err
    assert check_store(world / "cwd" / "plate.zarr")[0] == []


def _field_pixels(plate: Path) -> np.ndarray:
    image = next(p for p in sorted(plate.rglob("zarr.json")) if p.parent.name == "0" and p.parent.parent.name != "0"
                 and json.loads(p.read_text())["node_type"] == "array")
    return np.asarray(zarr.open_array(str(image.parent))[:])


def test_a_reexported_tiff_is_noticed_and_its_pixels_replace_the_stale_ones(cli, world):
    assert run_task(cli, "ingest", "plate.zarr")[0] == 0
    old = _field_pixels(world / "cwd" / "plate.zarr")
    for tif in sorted((world / "in" / "raw").glob("*.tif")):
        tifffile.imwrite(tif, tifffile.imread(tif) // 2 + 1)  # the instrument software re-exported it
    code, _, err = run_task(cli, "ingest", "plate.zarr")
    assert code == 0, err
    assert "skipping" not in err and "inputs changed since the last run: 4 files" in err, err
    new = _field_pixels(world / "cwd" / "plate.zarr")
    np.testing.assert_array_equal(new, old // 2 + 1)
    code, _, err = run_task(cli, "ingest", "plate.zarr")
    assert code == 0 and "already done (2 units), skipping" in err


def test_a_changed_input_chunk_reaches_a_downstream_step(cli, world, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "chain", "executor": {"kind": "sync"}, "steps": {
        "copy": {"task": "rechunk", "params": {"input": "../in/img.zarr", "output": "a.zarr", "chunks": [1, 4, 8, 8]}},
        "levels": {"task": "pyramid", "needs": ["copy"], "params": {"input": "a.zarr", "min_size": 8}}}}))
    assert cli("run", wf)[0] == 0
    src = zarr.open_array(str(world / "in" / "img.zarr" / "0"), mode="r+")
    src[...] = 123
    code, _, err = cli("run", wf)
    assert code == 0, err
    assert "inputs changed" in err
    level1 = np.asarray(zarr.open_array(str(world / "cwd" / "a.zarr" / "1"))[:])
    assert (level1 == 123).all()


# -- reruns on what others wrote ------------------------------------------------------------------
def test_reshard_never_replaces_a_well_plate_another_tool_wrote(cli, world):
    plate = world / "in" / "plate.zarr"
    assert cli("task", "reshard", "--executor", "sync", "--set", f"input={plate}", "--set", "min_size=8")[0] == 0
    forget_ownership(world / "in" / "plate-wells.zarr")  # as if another tool had written it
    before = snapshot(world)
    code, _, err = cli("task", "reshard", "--executor", "sync", "--set", f"input={plate}", "--set", "min_size=8",
                       "--overwrite")
    assert_refused(code, err, "not created by zarrmill")
    assert changes(before, snapshot(world)) == []


def test_a_downstream_step_gets_no_rights_on_a_foreign_store_when_upstream_changes(cli, world, tmp_path):
    """The second step adds levels to the user's own image; when the first step redoes its work,
    the second is redone too, but the image's existing levels (not zarrmill's) are never replaced."""
    img = world / "in" / "img.zarr"
    assert cli("task", "pyramid", "--executor", "sync", "--set", f"input={img}", "--set", "min_size=8")[0] == 0
    forget_ownership(img)  # its levels now look like another tool's
    wf = tmp_path / "wf.yaml"
    steps = {"gen": {"task": "generate", "params": {"output": "g.zarr", "shape": [1, 4, 16, 16], "axes": "czyx",
                                                     "chunks": [1, 4, 16, 16], "seed": 0}},
             "levels": {"task": "pyramid", "needs": ["gen"], "params": {"input": str(img), "min_size": 8}}}
    wf.write_text(json.dumps({"name": "t", "executor": {"kind": "sync"}, "steps": steps}))
    before = snapshot(world / "in")
    code, _, err = cli("run", wf)
    last = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err and "not written by zarrmill" in last, err
    assert changes(before, snapshot(world / "in")) == []


def test_two_runs_on_one_output_at_once_one_is_refused(world):
    big = ["--set", "output=big.zarr", "--set", "shape=[2,32,512,512]", "--set", "axes=czyx",
           "--set", "chunks=[1,8,32,32]", "--set", "unit_mb=0.02"]
    first = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "generate", "--executor", "sync", *big],
                             cwd=world / "cwd", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = bookkeeping(world / "cwd" / "big.zarr") / "lock"
    deadline = time.monotonic() + 30
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lock.exists(), "the first run never took its lock"
    second = zarrmill_subprocess("task", "generate", "--executor", "sync", *big, cwd=world / "cwd")
    assert first.wait(120) == 0, first.stderr.read()
    assert second.returncode == 2 and "another zarrmill run is writing this output" in second.stderr, second.stderr
    assert zarrmill_subprocess("check", "big.zarr", cwd=world / "cwd").returncode == 0


def test_a_killed_run_leaves_a_store_check_refuses_and_a_rerun_finishes(world):
    big = ["--set", "output=big.zarr", "--set", "shape=[2,32,512,512]", "--set", "axes=czyx",
           "--set", "chunks=[1,8,32,32]", "--set", "unit_mb=0.02"]
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "generate", "--executor", "sync", *big],
                            cwd=world / "cwd", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not done_units(world / "cwd" / "big.zarr", "generate") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert done_units(world / "cwd" / "big.zarr", "generate"), "the run recorded no unit before the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    check = zarrmill_subprocess("check", "big.zarr", cwd=world / "cwd")
    assert check.returncode == 1 and "unfinished" in check.stdout
    rerun = zarrmill_subprocess("task", "generate", "--executor", "sync", *big, cwd=world / "cwd")
    assert rerun.returncode == 0, rerun.stderr
    assert zarrmill_subprocess("check", "big.zarr", cwd=world / "cwd").returncode == 0


def test_check_passes_a_bare_zarr_array_as_the_kind_it_is(cli, world):
    path = world / "cwd" / "bare.zarr"
    zarr.create_array(str(path), shape=(4, 6), chunks=(2, 3), dtype="uint16")[...] = 3
    code, out, _ = cli("check", path)
    assert code == 0 and ": ok (zarr array, " in out, out


@pytest.mark.parametrize("store", ["bare-group", "damaged-array", "no-ome", "no-version", "unfinished", "corrupt-json"])
def test_check_refuses_what_is_not_a_finished_ome_zarr(cli, world, store):
    path = world / "cwd" / "s.zarr"
    if store == "bare-group":
        zarr.open_group(str(path), mode="w")
    elif store == "damaged-array":  # a bare array is checked as the array it is: its chunks must decode
        zarr.create_array(str(path), shape=(4,), chunks=(2,), dtype="uint8")[...] = 7
        (path / "c" / "1").write_bytes(b"not a chunk")
    elif store == "no-ome":
        zarr.open_group(str(path), mode="w").attrs["hello"] = 1
    else:
        assert run_task(cli, "generate", "s.zarr")[0] == 0
        if store == "no-version":
            set_json(path / "zarr.json", lambda d: d["attributes"]["ome"].pop("version"))
        elif store == "unfinished":
            step = bookkeeping(path) / "steps" / "generate" / "step.json"
            set_json(step, lambda d: d.__setitem__("state", "running"))
        else:
            (path / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_type": "gr')
    code, out, err = cli("check", path)
    assert code == 1 and "Traceback" not in out + err
    reason = {"bare-group": "no OME-NGFF metadata", "damaged-array": "cannot read the array", "no-ome": "no OME-NGFF metadata",
              "no-version": "has no 'version'", "unfinished": "is unfinished",
              "corrupt-json": "not valid JSON"}[store]
    assert reason in out, out  # the reason, not only the exit code
    code, out, _ = cli("check", path, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and any(reason in p for p in doc["problems"]), doc


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../../x", "x y", "-dash"])
def test_step_names_that_would_name_folders_badly_are_refused(cli, world, tmp_path, name):
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "t", "executor": {"kind": "sync"}, "steps": {name: {
        "task": "generate", "params": {"output": "s.zarr", "shape": [4, 16, 16]}}}}))
    before = snapshot(world)
    code, _, err = cli("run", wf)
    assert_refused(code, err, "step name")
    assert changes(before, snapshot(world)) == []


def test_a_claim_killed_before_its_owner_marker_was_renamed_into_place_is_resumed(cli, world):
    """SIGKILL between writing owner.json's temp file and renaming it: the folder holds only
    zarrmill's bookkeeping, so the rerun claims it instead of calling it someone else's."""
    marker = bookkeeping(world / "cwd" / "k.zarr")
    marker.mkdir(parents=True)
    (marker / "owner.json.0123abcd.partial").write_text('{"tool": "zarr')
    (marker / "lock").write_text("")  # the lock file was created, its holder killed before writing it
    past = time.time() - 10
    os.utime(marker / "lock", (past, past))
    code, _, err = run_task(cli, "generate", "k.zarr")
    assert code == 0, err
    assert json.loads((marker / "owner.json").read_text())["tool"] == "zarrmill"


def test_check_fails_where_plate_readers_fail_on_a_well_of_unequal_images(cli, world):
    """A well listing images of different shapes (what in-place reshard used to write, and what other
    tools may): ome-zarr-py's Reader fails on it, so check must too."""
    source = world / "in" / "plate.zarr"
    assert cli("task", "reshard", "--executor", "sync", "--set", f"input={source}", "--set", "min_size=8")[0] == 0
    plate = world / "in" / "plate-wells.zarr"
    well_path = json.loads((plate / "zarr.json").read_text())["attributes"]["ome"]["plate"]["wells"][0]["path"]
    fov = "fov1"  # the well image again at half its height, beside it: readers stack a well's images in a grid
    shutil.copytree(plate / well_path / "well", plate / well_path / fov)
    for level in (plate / well_path / fov).iterdir():
        if level.name.isdigit():
            arr = zarr.open_array(str(level))
            zarr.create_array(str(level), shape=arr.shape[:-2] + (max(1, arr.shape[-2] // 2), arr.shape[-1]),
                              dtype=arr.dtype, overwrite=True, zarr_format=3)
    well_json = plate / well_path / "zarr.json"
    well_meta = json.loads(well_json.read_text())
    well_meta["attributes"]["ome"]["well"]["images"].append({"path": fov, "acquisition": 0})
    well_json.write_text(json.dumps(well_meta))
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    with pytest.raises(ValueError):  # the well node tiles its images: "Shapes do not align"-like errors
        list(Reader(parse_url(str(plate / well_path)))())[0].data[0].compute()
    code, out, _ = cli("check", plate)
    assert code == 1 and "differ in shape" in out
