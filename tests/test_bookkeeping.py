"""zarrmill's bookkeeping (owner marker, locks, ledger) lives beside a store, not inside it (#27 item
5): readers see only zarr nodes, while ownership, resume and --overwrite keep working, and a
marker left behind by a deleted store never makes another folder at that path zarrmill's."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from adversarial_world import changes, snapshot
from conftest import bookkeeping
from helpers import run_task

from zarrmill.errors import UnsafeOutputError
from zarrmill.io.storage.guard import OutputGuard

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


def test_a_finished_store_is_known_by_its_provenance_and_holds_no_claim(cli, tmp_path):
    """Once its step finished, the store names its marker's id in its provenance and its claim file
    is gone; a foreign store moved to that path carries neither, marker or not."""
    out = tmp_path / "img.zarr"
    assert generate(cli, out)[0] == 0
    ident = json.loads((bookkeeping(out) / "owner.json").read_text())["id"]
    assert json.loads((out / "zarr.json").read_text())["attributes"]["zarrmill"]["provenance"]["owner"] == ident
    assert not (out / ".zarrmill-claim").exists()
    shutil.rmtree(out)
    foreign_store(out)
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


def test_before_its_first_step_finished_a_store_is_known_by_its_claim(tmp_path):
    """Claimed but not finished (a kill before provenance), the store carries its marker's id in its
    claim file: it is zarrmill's through any path that reaches it (a symlink here; another mount in
    test_shared_storage.py), whatever device numbers say, and another folder moved there is not."""
    out = tmp_path / "img.zarr"
    guard = OutputGuard(out)
    guard.claim("generate")
    guard.commit()
    (out / "data.bin").write_bytes(b"written by the step")
    owner = bookkeeping(out) / "owner.json"
    doc = json.loads(owner.read_text())
    owner.write_text(json.dumps({**doc, "folder": [1, 2]}))  # what an older marker held: never judged
    assert OutputGuard(out).owned()
    (tmp_path / "via").symlink_to(tmp_path)
    assert OutputGuard(tmp_path / "via" / "img.zarr").owned()
    other = tmp_path / "other.zarr"
    foreign_store(other)
    shutil.rmtree(out)
    other.rename(out)
    assert not OutputGuard(out).owned()
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeOutputError, match="not created by zarrmill"):
        OutputGuard(out).check()
    assert changes(before, snapshot(tmp_path)) == []


def test_a_claim_without_its_marker_proves_nothing_and_a_marker_without_a_claim_neither(tmp_path):
    out = tmp_path / "img.zarr"
    guard = OutputGuard(out)
    guard.claim("generate")
    (out / "data.bin").write_bytes(b"x")
    claim = (out / ".zarrmill-claim").read_bytes()
    (out / ".zarrmill-claim").unlink()
    assert not OutputGuard(out).owned()  # the marker alone
    (out / ".zarrmill-claim").write_bytes(claim)
    shutil.rmtree(bookkeeping(out))
    assert not OutputGuard(out).owned()  # the claim alone


def test_a_resume_removes_temp_files_only_where_zarrmill_may_delete(tmp_path):
    """Resuming a step that adds to someone else's store (pyramid levels) removes a killed unit's
    temp files under the nodes zarrmill created, never a file of that name in the owner's nodes."""
    from zarrmill.runtime.core.resume import remove_partial_files

    store = tmp_path / "theirs.zarr"
    foreign_store(store)
    theirs = store / "data" / "c" / "stray.partial"
    theirs.parent.mkdir(parents=True, exist_ok=True)
    theirs.write_bytes(b"the owner's tool keeps this")
    guard = OutputGuard(store, [store], in_place=True)
    guard.claim("pyramid")
    level = guard.will_create(store / "1")
    level.mkdir()
    ours = level / "chunk.0123abcd.partial"
    ours.write_bytes(b"half a chunk")
    kept = bookkeeping(store) / "steps" / "pyramid" / "step.json.0123abcd.partial"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"half a record")
    remove_partial_files(guard)
    assert theirs.read_bytes() == b"the owner's tool keeps this"
    assert not ours.exists() and not kept.exists()
