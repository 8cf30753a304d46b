"""zarrmill's bookkeeping (owner marker, locks, ledger) lives beside a store, not inside it (#27 item
5): readers see only zarr nodes, while ownership, resume and --overwrite keep working, and a
marker left behind by a deleted store never makes another folder at that path zarrmill's."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import zarr
from adversarial_world import changes, snapshot
from conftest import bookkeeping
from helpers import run_task

GEN = ("shape=[8,32,32]", "n_blobs=5")


def generate(cli, out: Path, *extra: str) -> tuple[int, str]:
    return run_task(cli, "generate", f"output={out}", *GEN, *extra)


def foreign_store(path: Path) -> None:
    arr = zarr.create_array(str(path / "data"), shape=(4, 4), dtype="uint8")
    arr[...] = 7


def test_the_store_holds_only_zarr_nodes_and_readers_walk_it_without_warnings(cli, tmp_path):
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["0", "zarr.json"]
    assert (bookkeeping(out) / "owner.json").is_file() and (bookkeeping(out) / "steps").is_dir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = zarr.open_group(str(out), mode="r")
        assert [name for name, _ in group.members(max_depth=None)] == ["0"]
        group.tree()


def test_resume_and_overwrite_still_work_on_a_store_whose_bookkeeping_is_beside_it(cli, tmp_path):
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    code, err = generate(cli, out)
    assert code == 0 and "already done" in err
    code, err = generate(cli, out, "seed=3")
    assert code == 2 and "--overwrite" in err
    assert cli("task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={out}",
               *[a for s in (*GEN, "seed=3") for a in ("--set", s)])[0] == 0
    assert cli("check", out)[0] == 0


def test_a_marker_left_by_a_deleted_store_never_makes_a_new_folder_zarrmills(cli, tmp_path):
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    shutil.rmtree(out)  # the user deletes the store, not the hidden folder beside it
    foreign_store(out)
    before = snapshot(tmp_path)
    code, err = generate(cli, out)
    assert code == 2 and "not created by zarrmill" in err, err
    code, _, err = cli("task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={out}",
                       *[a for s in GEN for a in ("--set", s)])
    assert code == 2 and "not created by zarrmill" in err, err
    assert changes(before, snapshot(tmp_path)) == []


def test_a_reused_inode_is_not_enough_once_the_store_was_finished(cli, tmp_path):
    """Even if the new folder got the deleted store's inode (file systems reuse them), the marker
    was sealed: the store must name it in its provenance, and another tool's store does not."""
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    shutil.rmtree(out)
    foreign_store(out)
    owner = bookkeeping(out) / "owner.json"
    doc = json.loads(owner.read_text())
    assert doc["sealed"] is True
    st = out.stat()
    owner.write_text(json.dumps({**doc, "folder": [st.st_dev, st.st_ino]}))  # as if the inode was reused
    before = snapshot(tmp_path)
    code, _, err = cli("task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={out}",
                       *[a for s in GEN for a in ("--set", s)])
    assert code == 2 and "not created by zarrmill" in err, err
    assert changes(before, snapshot(tmp_path)) == []
    assert (np.asarray(zarr.open_array(str(out / "data"))[...]) == 7).all()


def test_a_copy_of_a_zarrmill_store_is_not_owned_where_it_was_copied(cli, tmp_path):
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    copy = tmp_path / "copy.zarr"
    shutil.copytree(out, copy)
    before = snapshot(tmp_path)
    code, _, err = cli("task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={copy}",
                       *[a for s in (*GEN, "seed=5") for a in ("--set", s)])
    assert code == 2 and "not created by zarrmill" in err, err
    assert changes(before, snapshot(tmp_path)) == []


def test_before_its_first_step_finished_a_store_is_known_by_its_folder(cli, tmp_path):
    """Killed before sealing (no provenance yet), the marker still names the folder by device and
    inode: another folder moved to that path is not zarrmill's."""
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    owner = bookkeeping(out) / "owner.json"
    owner.write_text(json.dumps({**json.loads(owner.read_text()), "sealed": False}))  # as if killed before
    other = tmp_path / "other.zarr"
    foreign_store(other)  # made while the store still exists: its inode is another one
    shutil.rmtree(out)
    other.rename(out)
    before = snapshot(tmp_path)
    code, _, err = cli("task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={out}",
                       *[a for s in (*GEN, "seed=2") for a in ("--set", s)])
    assert code == 2 and "not created by zarrmill" in err, err
    assert changes(before, snapshot(tmp_path)) == []
