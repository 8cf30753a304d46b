"""A lab's group-writable share (issue 65): a setgid folder, the runner with umask 002, and a real
second user, the colleague, who swaps a folder of the store being written for a link to the
runner's private folder with one renameat2(RENAME_EXCHANGE) while chunks are being written.

Before: the folders zarrmill made were group-writable (umask 002), so the colleague could swap a
well folder, and tensorstore's writes by path followed the link: chunk files landed in the private
folder. Now nothing inside the store is group-writable while zarrmill writes it, and pixels are
written through a handle of the array's folder, so a swap of the store itself redirects nothing."""
from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from adversarial_world import snapshot
from conftest import tree_digest

# one worker runs them all (-n 2 --dist loadgroup): the colleague is one user, made and removed once
pytestmark = pytest.mark.xdist_group("colleague")
HERE = Path(__file__).parent
USER, GROUP = "zmcolleague", "zmlab"
SYSTEM_PYTHON = "/usr/bin/python3"  # the colleague's: the clone's venv may sit in a folder only root enters


@pytest.fixture(scope="module")
def colleague():
    """A second user in a group shared with the runner; made for these tests, removed after."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (the colleague)")
    if not (shutil.which("useradd") and shutil.which("setpriv") and os.path.exists(SYSTEM_PYTHON)):
        pytest.skip("needs useradd, setpriv and the system's python3")
    made_group = made_user = False
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", "-f", GROUP], check=True)
        made_group = True
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-N", "-g", GROUP, "-s", "/usr/sbin/nologin", USER], check=True)
        made_user = True
    yield USER
    if made_user:
        subprocess.run(["userdel", USER], check=False)
    if made_group:
        subprocess.run(["groupdel", GROUP], check=False)


@pytest.fixture
def share(colleague):
    """base/ (0755): lab/ (root:zmlab 2775, the share), thesis/ (0700, the runner's private
    folder, with a file in it), raw/ (the plate to convert) and the colleague's script."""
    base = Path(tempfile.mkdtemp(prefix="zm-share-"))
    try:
        base.chmod(0o755)
        lab = base / "lab"
        lab.mkdir()
        os.chown(lab, 0, grp.getgrnam(GROUP).gr_gid)
        lab.chmod(0o2775)
        thesis = base / "thesis"
        thesis.mkdir(mode=0o700)
        (thesis / "chapter1.tex").write_text("the runner's own")
        for script in ("colleague_swap.py", "colleague_plant.py"):
            shutil.copy(HERE / script, base / script)
            (base / script).chmod(0o644)
        raw = base / "raw"
        code = zarrmill("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                        "--set", "wells=[B03,C04,D05]", "--set", "grid=[3,3]", "--set", "shape=[256,256]",
                        "--set", "z_planes=8").returncode
        assert code == 0
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def zarrmill(*args: object, umask: int = 0o002) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zarrmill", *map(str, args)], capture_output=True, text=True,
                          preexec_fn=lambda: os.umask(umask), timeout=300)


def play_colleague(base: Path, target: Path, wait_for: Path) -> subprocess.Popen:
    return subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--init-groups", SYSTEM_PYTHON,
                             str(base / "colleague_swap.py"), str(target), str(wait_for), str(base / "thesis"),
                             str(base / "lab"), "60", str(base / "stop")], cwd=base, stdout=subprocess.PIPE, text=True)


def report_of(base: Path, watcher: subprocess.Popen) -> dict:
    """What the colleague did, once the run is over (they give up then)."""
    (base / "stop").touch()
    return json.loads(watcher.communicate(timeout=90)[0])


def ingest(base: Path, out: Path) -> subprocess.CompletedProcess:
    return zarrmill("task", "ingest", "--executor", "sync", "--set", f"input={base / 'raw'}", "--set", f"output={out}")


def test_the_colleague_cannot_swap_a_folder_inside_the_store(share, protected_symlinks):
    ref = share / "ref.zarr"
    assert ingest(share, ref).returncode == 0
    out = share / "lab" / "plate2.zarr"
    before = snapshot(share / "thesis")
    watcher = play_colleague(share, out / "C" / "04", out / "C" / "04" / "0" / "0")
    run = ingest(share, out)
    report = report_of(share, watcher)
    assert not report["swapped"] and report["errors"].get("EACCES"), report
    assert run.returncode == 0, run.stderr
    assert snapshot(share / "thesis") == before, "nothing lands in the runner's private folder"
    assert tree_digest(out) == tree_digest(ref)
    for folder in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        assert not folder.stat().st_mode & 0o022, f"{folder} is writable by others while umask is 002"


def prepare(base: Path, task: str) -> list[str]:
    """What the colleague's target run is given (its input made first, outside the share)."""
    out = base / "lab" / "plate2.zarr"
    raw = f"input={base / 'raw'}"
    if task == "ingest":
        return ["task", "ingest", "--set", raw, "--set", f"output={out}"]
    if task == "follow":  # a finished acquisition, followed: converted well by well, then done
        return ["follow", "--set", raw, "--set", f"output={out}", "--poll", "0.2", "--settle", "0.2", "--quiet", "2"]
    if task == "pyramid":  # level 0 only first, then its levels written in place
        assert zarrmill("task", "ingest", "--executor", "sync", "--set", raw, "--set", f"output={out}",
                        "--set", "min_size=4096").returncode == 0
        return ["task", "pyramid", "--set", f"input={out}", "--set", "min_size=16"]
    if task == "reshard":
        return ["task", "reshard", "--set", f"input={base / 'ref.zarr'}", "--set", f"output={out}",
                "--set", "overview=true"]
    volume = base / "vol.zarr"
    assert zarrmill("task", "generate", "--executor", "sync", "--set", f"output={volume}", "--set",
                    "shape=[48,256,256]", "--set", "chunks=[16,64,64]", "--set", "pixel_size=[2.0,1.0,1.0]").returncode == 0
    if task == "compress":
        return ["task", "compress", "--set", f"input={volume}", "--set", f"output={out}", "--set", "patch=[16,32,32]"]
    import numpy as np

    np.save(base / "points.npy", np.random.default_rng(1).uniform(0, 1, (3000, 3)) * [48, 256, 256])
    return ["task", "patch-extract", "--set", f"input={volume}", "--set", f"output={out}", "--set",
            f"points={base / 'points.npy'}", "--set", "cuboid=[8,16,16]", "--set", "network_voxel_size=[2,1,1]",
            "--set", "patches_per_unit=64"]


PROTECTED_SYMLINKS = Path("/proc/sys/fs/protected_symlinks")


@pytest.fixture(params=["as it is", "0", "1"])
def protected_symlinks(request):
    """The kernel's fs.protected_symlinks (links in sticky world-writable folders followed only for
    their owner) as this machine has it, then off and on: zarrmill's writes must not depend on it.
    Restored after each case."""
    if request.param == "as it is":
        yield
        return
    try:
        before = PROTECTED_SYMLINKS.read_text().strip()
        PROTECTED_SYMLINKS.write_text(request.param)
    except OSError:
        pytest.skip("fs.protected_symlinks cannot be set here")
    try:
        yield
    finally:
        PROTECTED_SYMLINKS.write_text(before)


@pytest.mark.parametrize("task", ["ingest", "follow", "pyramid", "reshard", "compress", "patch-extract"])
def test_a_store_swapped_for_a_link_mid_run_writes_nothing_outside_and_the_rerun_completes(share, task):
    """The store's own name is in the share: the colleague exchanges it for a link to the runner's
    private folder once chunks are being written. Every write below the store goes through a
    handle of its root: nothing lands in the private folder; the run completes or stops with one
    line, and the rerun once the change is undone completes with the bytes of an undisturbed run."""
    assert ingest(share, share / "ref.zarr").returncode == 0
    out = share / "lab" / "plate2.zarr"
    args = prepare(share, task)
    undisturbed = share / "undisturbed"
    shutil.copytree(share / "lab", undisturbed, symlinks=True)
    before = snapshot(share / "thesis")
    watcher = play_colleague(share, out, f"{out}::{2 if task == 'compress' else 12}")  # compress: few files
    run = zarrmill(*args, "--executor", "sync")
    report = report_of(share, watcher)
    assert report["swapped"], report
    assert snapshot(share / "thesis") == before, "nothing lands in the runner's private folder"
    assert "Traceback" not in run.stderr and "unexpected" not in run.stderr, run.stderr
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.startswith("zarrmill: error:")]
        assert len(lines) == 1 and run.returncode in (1, 2), run.stderr
    # the colleague's change undone: the store back at its name, the link gone
    link = Path(report["link"])
    os.rename(link, share / "lab" / "moved-away")
    os.rename(out, link)
    os.rename(share / "lab" / "moved-away", out)
    link.unlink()
    rerun = zarrmill(*args, "--executor", "sync")
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(share / "thesis") == before
    # the same bytes as the same run where nobody swapped anything
    undisturbed_out = undisturbed / "plate2.zarr"
    moved = [a.replace(str(out), str(undisturbed_out)) for a in args]
    assert zarrmill(*moved, "--executor", "sync").returncode == 0
    ours, theirs = tree_digest(out), tree_digest(undisturbed_out)
    assert set(ours) == set(theirs)
    if task == "compress":  # a timed codec trial may choose differently in two runs: the pixels are equal
        import blosc2
        import numpy as np

        for rel in (k for k in ours if k.endswith(".b2nd")):
            assert np.array_equal(blosc2.open(str(out / rel))[:], blosc2.open(str(undisturbed_out / rel))[:]), rel
        return
    for rel in (k for k in ours if ours[k] != theirs[k]):  # only a summary naming its own folder may differ
        assert (out / rel).read_text().replace(str(out), "ROOT") == \
            (undisturbed_out / rel).read_text().replace(str(undisturbed_out), "ROOT"), rel


@pytest.mark.parametrize("instant", [0.6, 1.0, 1.5])
def test_a_run_killed_at_any_instant_then_planted_reruns_safely(share, instant):
    """SIGKILL at an instant of the run, then the colleague puts a link to the runner's private
    folder at the store's name (the store moved aside, or a link where none was yet) and drops a
    file beside it. The rerun writes nothing outside, touches none of the colleague's things and
    refuses in one line; once the change is undone, the rerun completes with the undisturbed bytes."""
    ref = share / "ref.zarr"
    assert ingest(share, ref).returncode == 0
    out = share / "lab" / "plate2.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "ingest", "--executor", "sync", "--set",
                             f"input={share / 'raw'}", "--set", f"output={out}"], preexec_fn=lambda: os.umask(0o002),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(instant)
    proc.kill()
    proc.wait()
    plant = subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={GROUP}", "--init-groups", SYSTEM_PYTHON,
                            str(share / "colleague_plant.py"), str(out), str(share / "thesis"), str(share / "lab")],
                           cwd=share, capture_output=True, text=True)
    assert plant.returncode == 0, plant.stderr
    report = json.loads(plant.stdout)
    assert report["planted"] in ("exchanged", "made"), report
    before, theirs = snapshot(share / "thesis"), (share / "lab" / "colleague-notes.txt").read_text()
    rerun = ingest(share, out)
    assert rerun.returncode == 2, rerun.stderr  # a link someone else made at the output: never written through
    assert len([line for line in rerun.stderr.splitlines() if line.startswith("zarrmill: error:")]) == 1, rerun.stderr
    assert "Traceback" not in rerun.stderr
    assert snapshot(share / "thesis") == before and out.is_symlink()
    assert (share / "lab" / "colleague-notes.txt").read_text() == theirs
    out.unlink()  # the colleague's change undone
    if report["planted"] == "exchanged":
        os.rename(report["moved"], out)
    rerun = ingest(share, out)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_digest(out) == tree_digest(ref)
    assert snapshot(share / "thesis") == before


def test_logs_are_the_users_own(share):
    """The error log beside a store in the share is readable by its owner only."""
    out = share / "lab" / "bad.zarr"
    run = zarrmill("task", "cluster-check", "--executor", "sync", "--set", f"output={out}", "--set", "units=2",
                   "--set", "hold_mb=-1")
    assert run.returncode == 2  # refused before anything runs: no log to make
    run = zarrmill("task", "ingest", "--executor", "sync", "--set", f"input={share / 'raw'}", "--set",
                   f"output={out}", "--set", "channel_names=[a,b,c,d,e,f,g]")
    for log in share.rglob("errors.log"):
        assert log.stat().st_mode & 0o077 == 0, log


def test_an_output_reached_through_the_users_own_link_is_written_through_its_real_folder(tmp_path):
    """The handle is of the root's real folder: a link of the user's own on the way (a /scratch
    link, a folder the user links from home) is followed as before."""
    raw = tmp_path / "raw"
    assert zarrmill("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", "wells=[B03]",
                    "--set", "grid=[1,2]", "--set", "shape=[64,64]", umask=0o022).returncode == 0
    (tmp_path / "scratch" / "p.zarr").mkdir(parents=True)  # an empty folder the user made and linked
    (tmp_path / "mine.zarr").symlink_to(tmp_path / "scratch" / "p.zarr")
    run = zarrmill("task", "ingest", "--executor", "sync", "--set", f"input={raw}", "--set",
                   f"output={tmp_path / 'mine.zarr'}", umask=0o022)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "scratch" / "p.zarr" / "zarr.json").is_file()
    assert zarrmill("check", tmp_path / "mine.zarr").returncode == 0


def test_a_worker_writes_only_into_the_store_that_carries_the_runs_owner_id(tmp_path):
    """Workers on other nodes cannot compare device numbers: the store is the run's by the owner id
    it carries (its claim), which the driver hands them. A real folder put at the store's name
    (a colleague's copy) is refused in one line; the store the run claimed is written."""
    import json as _json

    from zarrmill.io.storage.atomic import atomic_write_bytes
    from zarrmill.io.storage.handles import StoreChangedError, writing_into
    from zarrmill.io.storage.paths import CLAIM_FILE

    store = tmp_path / "plate.zarr"
    store.mkdir()
    (store / CLAIM_FILE).write_text(_json.dumps({"id": "run-a"}))
    with writing_into(store, carries="run-a"):
        atomic_write_bytes(store / "A" / "zarr.json", b"{}")
    assert (store / "A" / "zarr.json").read_bytes() == b"{}"
    store.rename(tmp_path / "moved-away")  # another real folder put at the store's name
    store.mkdir()
    (store / CLAIM_FILE).write_text(_json.dumps({"id": "someone-else"}))
    with writing_into(store, carries="run-a"), pytest.raises(StoreChangedError, match="changed during the run"):
        atomic_write_bytes(store / "B" / "zarr.json", b"{}")
    assert not (store / "B").exists()
