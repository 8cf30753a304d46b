"""A careless or hostile neighbour on shared storage: symlinks, files and folders planted at the
paths zarrmill creates or deletes, before a run and while it works, on disk and through a second
mount. Each case snapshots the neighbour's files (everything outside the output) before and after:
nothing of theirs is deleted, changed or published, and zarrmill says so in one line."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from adversarial_world import changes, snapshot
from conftest import bookkeeping

import zarrmill.generate as generate

GENERATE = ("shape=[1,4,32,32]", "axes=czyx", "chunks=[1,2,16,16]", "n_blobs=2", "unit_mb=0.01")


def _generate(cli, output: Path, *extra: str) -> tuple[int, str, str]:
    args = ["task", "generate", "--executor", "sync", "--set", f"output={output}"]
    for s in (*GENERATE, *extra):
        args += ["--set", s]
    return cli(*args)


@pytest.fixture
def patch_task(monkeypatch):
    """Replace a function of the generate task for one test (tasks are cached by the registry)."""
    from zarrmill.runtime.execution.registry import get_task

    def patch(name: str, fn) -> None:
        monkeypatch.setattr(generate, name, fn)
        get_task.cache_clear()

    yield patch
    get_task.cache_clear()


def _victim(root: Path) -> Path:
    """A colleague's folder: a thesis, a key, a subfolder."""
    thesis = root / "victim" / "thesis"
    (thesis / "chapters").mkdir(parents=True)
    (thesis / "thesis.tex").write_text("\\chapter{Five years}\n")
    (thesis / "chapters" / "one.tex").write_text("results\n")
    (root / "victim" / "credentials").write_text("[default]\naws_secret_access_key = VICTIMSECRET\n")
    return root / "victim"


def _after_first_unit(patch_task, act) -> list:
    """The neighbour acts once the run's first unit is written: ``act(params)``'s result is kept."""
    real_run = generate.run_unit
    planted: list = []

    def run_then_act(p, unit):
        done = real_run(p, unit)
        if not planted:
            planted.append(act(p))
        return done

    patch_task("run_unit", run_then_act)
    return planted


def _one_line(err: str, *words: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.startswith("zarrmill: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]


# -- 1. a symlink at a store's bookkeeping folder ---------------------------------------------
def test_a_symlink_at_the_bookkeeping_folder_deletes_nothing_it_points_to(cli, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = _victim(tmp_path)
    os.symlink(victim / "thesis", shared / ".plate.zarr.zarrmill")
    before = snapshot(tmp_path)
    code, _, err = _generate(cli, shared / "plate.zarr")
    assert code == 2, err
    _one_line(err, ".plate.zarr.zarrmill", "symbolic link")
    assert changes(before, snapshot(tmp_path)) == []  # not even the store folder was made


def test_a_bookkeeping_folder_of_another_user_is_refused_untouched(cli, tmp_path):
    """A real folder at the bookkeeping path that a colleague (another user id) made."""
    shared = tmp_path / "shared"
    planted = shared / ".plate.zarr.zarrmill"
    (planted / "steps").mkdir(parents=True)
    (planted / "owner.json").write_text("{}")
    (planted / "steps" / "results.csv").write_text("a,b\n1,2\n")
    for path in (planted, planted / "steps", planted / "owner.json", planted / "steps" / "results.csv"):
        os.chown(path, 65534, 65534)
    before = snapshot(tmp_path)
    code, _, err = _generate(cli, shared / "plate.zarr")
    assert code == 2, err
    _one_line(err, "user id 65534")
    assert changes(before, snapshot(tmp_path)) == []


def test_a_folder_of_someone_elses_files_at_the_bookkeeping_path_is_refused(cli, tmp_path):
    shared = tmp_path / "shared"
    planted = shared / ".plate.zarr.zarrmill"
    planted.mkdir(parents=True)
    (planted / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    code, _, err = _generate(cli, shared / "plate.zarr")
    assert code == 2, err
    _one_line(err, "did not make")
    assert changes(before, snapshot(tmp_path)) == []


def test_a_bookkeeping_folder_swapped_for_a_link_during_the_run_reaches_nothing(cli, tmp_path, patch_task):
    """After the first unit the neighbour moves the bookkeeping folder away and puts a link to
    their folder in its place: the run stops with one line, nothing of theirs is touched."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = _victim(tmp_path)
    out = shared / "plate.zarr"

    def swap(p) -> bool:
        os.rename(bookkeeping(out), shared / "moved-away")
        os.symlink(victim / "thesis", bookkeeping(out))
        return True

    planted = _after_first_unit(patch_task, swap)
    before = snapshot(victim)
    code, _, err = _generate(cli, out)
    assert planted and code != 0, err
    assert "symbolic link" in err and "Traceback" not in err
    assert changes(before, snapshot(victim)) == []
    assert os.path.islink(bookkeeping(out))  # the neighbour's link stays: it is not zarrmill's


# -- 2. a failed plan's rollback and the folders the run created -------------------------------
def test_a_failed_plan_keeps_what_a_colleague_wrote_into_a_folder_the_run_made(cli, tmp_path, patch_task):
    shared = tmp_path / "shared"
    shared.mkdir()
    out = shared / "new" / "deeper" / "plate.zarr"
    real_plan = generate.plan

    def plan_then_fail(p, ctx):
        real_plan(p, ctx)
        ctx.create_nodes()  # the skeleton is written while planning (as compress and patches do)
        (shared / "new" / "other").mkdir()
        (shared / "new" / "other" / "results.csv").write_text("well,count\nB03,12\n")
        from zarrmill.errors import InputError
        raise InputError(f"{p.output}: the plan failed on purpose")

    patch_task("plan", plan_then_fail)
    code, _, err = _generate(cli, out)
    assert code == 2, err
    assert (shared / "new" / "other" / "results.csv").read_text() == "well,count\nB03,12\n"
    # what the run made and nobody else touched is gone; the folder holding the colleague's file stays
    assert sorted(p.name for p in (shared / "new").iterdir()) == ["other"]
    assert "left as it is" in err and str(shared / "new") in err


@pytest.mark.parametrize("made", [False, True], ids=["declared", "made-while-planning"])
def test_a_failed_plan_still_leaves_storage_as_it_was(cli, tmp_path, patch_task, made):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "keep.txt").write_text("x")
    before = snapshot(tmp_path)
    real_plan = generate.plan

    def plan_then_fail(p, ctx):
        real_plan(p, ctx)
        if made:  # the skeleton written while planning (compress, patches), else only declared
            ctx.create_nodes()
        from zarrmill.errors import InputError
        raise InputError(f"{p.output}: the plan failed on purpose")

    patch_task("plan", plan_then_fail)
    code, _, err = _generate(cli, shared / "a" / "b" / "plate.zarr")
    assert code == 2, err
    assert changes(before, snapshot(tmp_path)) == []


# -- 3. an .ozx build publishes only the files zarrmill wrote ------------------------------------
def test_a_link_planted_in_an_ozx_build_is_never_published(cli, tmp_path, patch_task):
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = _victim(tmp_path)
    target = shared / "img.ozx"

    def plant(p) -> Path:
        os.symlink(victim / "credentials", Path(p.output) / "0" / "stolen")
        return Path(p.output) / "0" / "stolen"

    planted = _after_first_unit(patch_task, plant)
    before = snapshot(victim)
    code, _, err = _generate(cli, target)
    assert planted and code == 2, err
    _one_line(err, "stolen", "symbolic link")
    assert not target.exists()
    assert changes(before, snapshot(victim)) == []
    assert os.path.islink(planted[0])  # left for its owner
    for leftover in bookkeeping(target).rglob("*.zip"):  # an archive in the making holds none of it
        assert b"VICTIMSECRET" not in leftover.read_bytes()


def test_a_link_at_the_archive_in_the_making_is_never_written_through(cli, tmp_path):
    """A link planted at packed.zip (where the archive is written) before the run."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = _victim(tmp_path)
    target = shared / "img.ozx"
    book = bookkeeping(target)
    from zarrmill.io.storage.guard_fs import make_own_folder
    make_own_folder(book)
    os.symlink(victim / "credentials", book / "packed.zip")
    before = snapshot(victim)
    code, _, err = _generate(cli, target)
    assert code == 2, err
    _one_line(err, "packed.zip", "symbolic link")
    assert changes(before, snapshot(victim)) == []
    assert os.path.islink(book / "packed.zip") and not target.exists()


# -- through a second mount: the neighbour on another node ---------------------------------------
def test_a_link_planted_through_another_mount_is_refused_on_this_one(cli, tmp_path, second_mount):
    node_a, node_b = second_mount
    victim = _victim(tmp_path)
    os.symlink(victim / "thesis", node_b / ".plate.zarr.zarrmill")  # planted on the other node
    before = snapshot(victim)
    code, _, err = _generate(cli, node_a / "plate.zarr")
    assert code == 2, err
    _one_line(err, "symbolic link")
    assert changes(before, snapshot(victim)) == []
    assert not (node_a / "plate.zarr").exists()


# -- the hands themselves ----------------------------------------------------------------------
def test_a_folder_on_the_way_swapped_for_a_link_stops_the_delete(tmp_path):
    from zarrmill.errors import UnsafeOutputError
    from zarrmill.io.storage.guard_fs import remove

    root = tmp_path / "store"
    (root / "a").mkdir(parents=True)
    (root / "a" / "chunk").write_text("mine")
    victim = _victim(tmp_path)
    os.rename(root / "a", tmp_path / "a-moved")
    os.symlink(victim / "thesis", root / "a")
    (victim / "thesis" / "chunk").write_text("theirs")
    with pytest.raises(UnsafeOutputError):
        remove(root, root / "a" / "chunk")
    assert (victim / "thesis" / "chunk").read_text() == "theirs"
    assert remove(root, root / "a")  # the link itself goes
    assert (victim / "thesis" / "thesis.tex").exists()


def test_the_bookkeeping_walk_never_follows_a_link_planted_inside(tmp_path):
    from zarrmill.errors import UnsafeOutputError
    from zarrmill.io.storage.backend import DiskBackend
    from zarrmill.io.storage.guard_fs import make_own_folder

    book = tmp_path / ".out.zarr.zarrmill"
    make_own_folder(book)
    (book / "steps").mkdir()
    (book / "steps" / "step.json").write_text("{}")
    victim = _victim(tmp_path)
    os.symlink(victim / "thesis", book / "steps" / "linked")
    backend = DiskBackend(book)
    assert backend.keys() == ["steps/step.json"]  # the link is never entered (os.walk listed the thesis)
    backend.delete(backend.keys())
    assert (victim / "thesis" / "thesis.tex").exists() and os.path.islink(book / "steps" / "linked")
    with pytest.raises(UnsafeOutputError):  # named, it is refused: zarrmill makes no links among its files
        backend.delete(["steps/linked"])
    assert os.path.islink(book / "steps" / "linked")


# -- a dry run touches nothing of the user's ---------------------------------------------------
def test_a_dry_run_of_a_labels_step_writes_nothing_beside_the_users_image(cli, tmp_path):
    import numpy as np
    import yaml
    from conftest import forget_ownership

    image = tmp_path / "img.zarr"
    assert _generate(cli, image)[0] == 0
    forget_ownership(image)  # the user's own image now, with no bookkeeping of zarrmill's beside it
    assert not os.path.lexists(bookkeeping(image))
    np.save(tmp_path / "mask.npy", np.zeros((4, 32, 32), np.uint16))
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump({"name": "dry", "executor": {"kind": "sync"}, "steps": {"labels": {
        "task": "labels", "params": {"input": str(tmp_path / "mask.npy"), "image": str(image)}}}}))
    before = snapshot(tmp_path)
    code, out, err = cli("run", wf, "--dry-run")
    assert code == 0, err
    assert changes(before, snapshot(tmp_path)) == []


# -- links planted at zarrmill's own files before a run ----------------------------------------
def _plant_claim(out: Path, target: Path) -> None:
    out.mkdir(parents=True)
    os.symlink(target, out / ".zarrmill-claim")


def _plant_lock(out: Path, target: Path) -> None:
    book = bookkeeping(out)
    book.mkdir(parents=True)
    os.symlink(target, book / "lock")


def _plant_ledger(out: Path, target: Path) -> None:
    book = bookkeeping(out)
    (book / "steps").mkdir(parents=True)
    os.symlink(target.parent, book / "steps" / "generate")


@pytest.mark.parametrize("plant", [_plant_claim, _plant_lock, _plant_ledger], ids=["claim", "lock", "ledger"])
def test_links_at_zarrmills_own_files_are_never_written_through(cli, tmp_path, plant):
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = _victim(tmp_path)
    out = shared / "plate.zarr"
    plant(out, victim / "credentials")
    before = snapshot(victim)
    code, _, err = _generate(cli, out)
    assert "Traceback" not in err
    assert changes(before, snapshot(victim)) == []
    if code == 0:  # the link was zarrmill's to replace (it stood in its own new store): the run is whole
        assert cli("check", out)[0] == 0


# -- in a bucket: a colleague's object under a prefix a failing run made -------------------------
def test_a_failed_plan_in_a_bucket_keeps_a_colleagues_object(cli, bucket, s3env, patch_task):
    fs = s3env.fs()
    url = f"s3://{bucket}/new/plate.zarr"
    real_plan = generate.plan

    def plan_then_fail(p, ctx):
        real_plan(p, ctx)
        ctx.create_nodes()  # the skeleton is written while planning (as compress and patches do)
        fs.pipe_file(f"{bucket}/new/plate.zarr/colleague.csv", b"well,count\n")
        fs.pipe_file(f"{bucket}/new/other/results.csv", b"a,b\n")
        fs.pipe_file(f"{bucket}/new/plate.zarr/0/colleague.csv", b"well,count\n")  # in a node the plan made
        from zarrmill.errors import InputError
        raise InputError(f"{p.output}: the plan failed on purpose")

    patch_task("plan", plan_then_fail)
    code, _, err = _generate(cli, url)
    assert code == 2, err
    left = s3env.objects(bucket)
    assert left["new/other/results.csv"] == b"a,b\n"
    assert left["new/plate.zarr/colleague.csv"] == b"well,count\n"
    assert left["new/plate.zarr/0/colleague.csv"] == b"well,count\n"
    assert "new/plate.zarr/0/zarr.json" not in left  # what the plan wrote there went


def test_a_link_at_the_error_log_is_never_appended_through(cli, tmp_path, patch_task):
    """A failed unit's traceback goes to the ledger's errors.log; a link planted there (to a
    colleague's file) while the step plans is never written through: one line names it."""
    shared = tmp_path / "shared"
    out = shared / "plate.zarr"
    victim = _victim(tmp_path)
    folder = bookkeeping(out) / "steps" / "generate"
    real_plan = generate.plan

    def plan_then_plant(p, ctx):
        units = real_plan(p, ctx)
        os.symlink(victim / "credentials", folder / "errors.log")
        return units

    def fail(p, unit):
        raise ValueError("a unit failed on purpose")

    patch_task("plan", plan_then_plant)
    patch_task("run_unit", fail)
    before = snapshot(victim)
    code, _, err = _generate(cli, out)
    assert code == 2, err
    _one_line(err, "errors.log", "symbolic link")
    assert changes(before, snapshot(victim)) == []
    assert os.path.islink(folder / "errors.log")


def test_a_store_swapped_for_a_link_before_overwrite_empties_it_reaches_nothing(cli, tmp_path, monkeypatch):
    """The neighbour renames the store away and links its path to the user's thesis in the instant
    between the run's checks and --overwrite emptying it: nothing of the thesis goes."""
    from zarrmill.io.storage.guard import OutputGuard

    shared = tmp_path / "shared"
    out = shared / "out.zarr"
    victim = _victim(tmp_path)
    assert _generate(cli, out)[0] == 0
    real_clear = OutputGuard.clear

    def swap_then_clear(self):
        os.rename(out, shared / "moved")
        os.symlink(victim / "thesis", out)
        return real_clear(self)

    monkeypatch.setattr(OutputGuard, "clear", swap_then_clear)
    before = snapshot(victim)
    code, _, err = _generate(cli, out, "n_blobs=7", "--overwrite") if False else cli(
        "task", "generate", "--executor", "sync", "--overwrite", "--set", f"output={out}",
        *[x for s in (*GENERATE[:-2], "n_blobs=7", GENERATE[-1]) for x in ("--set", s)])
    assert code != 0, err
    assert "Traceback" not in err
    assert changes(before, snapshot(victim)) == []


def test_a_link_someone_else_made_at_the_output_path_is_refused(cli, tmp_path):
    """A colleague links the output path to another of the user's stores: never written through."""
    shared = tmp_path / "shared"
    shared.mkdir()
    precious = tmp_path / "precious.zarr"
    assert _generate(cli, precious)[0] == 0
    os.symlink(precious, shared / "out.zarr")
    os.chown(shared / "out.zarr", 65534, 65534, follow_symlinks=False)
    before = snapshot(tmp_path / "precious.zarr")
    code, _, err = _generate(cli, shared / "out.zarr")
    assert code == 2, err
    _one_line(err, "symbolic link", "user id 65534")
    assert changes(before, snapshot(precious)) == []


def test_a_failed_plan_keeps_a_colleagues_file_written_into_a_node_it_made(cli, tmp_path, patch_task):
    out = tmp_path / "shared" / "plate.zarr"
    real_plan = generate.plan

    def plan_then_fail(p, ctx):
        real_plan(p, ctx)
        ctx.create_nodes()  # made while planning, as compress and patches make theirs: "0" is the run's
        theirs = out / "0" / "colleague.csv"
        theirs.write_text("well,count\n")
        os.chown(theirs, 65534, 65534)  # another user's, as on a shared folder
        from zarrmill.errors import InputError
        raise InputError(f"{p.output}: the plan failed on purpose")

    patch_task("plan", plan_then_fail)
    code, _, err = _generate(cli, out)
    assert code == 2, err
    assert (out / "0" / "colleague.csv").read_text() == "well,count\n"
    assert not (out / "0" / "zarr.json").exists() and not (out / "zarr.json").exists()  # the run's own went
    assert "not this run's" in err


def test_a_run_the_lock_refuses_leaves_the_running_ones_store_untouched(tmp_path):
    """Cron fired twice: run B makes the store's folders, run A takes the lock first and writes;
    B, refused by the lock, withdraws without touching anything A uses."""
    from zarrmill.errors import OutputLockedError
    from zarrmill.io.storage.guard import open_guard
    from zarrmill.runtime.execution import engine

    root = tmp_path / "shared" / "plate.zarr"
    (tmp_path / "shared").mkdir()
    second = open_guard(root)
    second.check()
    second.prepare()  # B made the store and its bookkeeping folder
    first = open_guard(root)
    first.check()
    lock = engine._lock_output("gen", first)
    try:
        first.claim("gen")
        first.make_dirs(root / "0")
        (root / "0" / "chunk").write_bytes(b"A's data")
        first.make_dirs(first.bookkeeping / "steps" / "gen")
        (first.bookkeeping / "steps" / "gen" / "step.json").write_text("{}")
        before = snapshot(tmp_path)
        with pytest.raises(OutputLockedError):
            engine._lock_output("gen", second)
        assert changes(before, snapshot(tmp_path)) == []
        assert first.owned()
    finally:
        lock.release()


def test_a_link_someone_else_made_on_the_way_to_the_output_is_refused(cli, tmp_path):
    """A colleague's link at a folder the output is made under (``shared/new`` -> their folder):
    nothing is created through it."""
    shared, theirs = tmp_path / "shared", tmp_path / "theirs"
    shared.mkdir()
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    os.symlink(theirs, shared / "new")
    os.chown(shared / "new", 65534, 65534, follow_symlinks=False)
    before = snapshot(tmp_path)
    code, _, err = _generate(cli, shared / "new" / "plate.zarr")
    assert code == 2, err
    _one_line(err, "runs through", "symbolic link", "user id 65534")
    assert changes(before, snapshot(tmp_path)) == []


def test_a_made_folder_a_neighbour_swaps_for_a_link_at_the_last_moment_is_left_and_so_is_theirs(tmp_path, monkeypatch):
    """remove_made_folders' rmdir (guard_fs.remove_empty): the folder is judged with lstat, then a
    neighbour replaces it with a link to their own folder before the rmdir. The rmdir refuses the
    link (never followed); the link and their folder stay, and the run goes on with a warning."""
    from zarrmill.io.storage import guard_fs

    made, theirs = tmp_path / "made", tmp_path / "theirs"
    made.mkdir()
    theirs.mkdir()
    (theirs / "data.txt").write_text("the neighbour's")
    real_listdir = os.listdir

    def swap_then_list(path):
        names = real_listdir(path)
        if Path(path) == made and made.is_dir() and not made.is_symlink():
            made.rmdir()
            made.symlink_to(theirs)  # between the check and the rmdir
        return names

    monkeypatch.setattr(guard_fs.os, "listdir", swap_then_list)
    assert guard_fs.remove_empty(made) is False
    assert made.is_symlink() and (theirs / "data.txt").read_text() == "the neighbour's"
    monkeypatch.setattr(guard_fs.os, "listdir", real_listdir)
    assert guard_fs.remove_empty(made) is False, "a link where the folder was is left (lstat: not a folder)"
    assert made.is_symlink() and theirs.is_dir()
