"""One folder seen from many nodes, and drives without hard links (#36): a store is zarrmill's by
the identity it carries, never by device numbers or the path it was reached through.

A second node is a second mount of the same folder (Debian's bindfs: another device number, as a
second NFS client sees); a drive without hard links is FAT through fusefat. Both are mounted only
inside pytest's temporary folder (conftest: second_mount, fat_drive)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from adversarial_world import changes, snapshot
from conftest import done_units, tree_digest
from test_object_store import generate, task

pytestmark = pytest.mark.timeout(600)
BIG = ["shape=[2,32,512,512]", "axes=czyx", "chunks=[1,8,32,32]", "unit_mb=0.02"]


def test_the_two_mounts_are_one_folder_under_two_device_numbers(second_mount):
    a, b = second_mount
    (a / "probe").write_text("x")
    assert (b / "probe").read_text() == "x"
    assert os.stat(a).st_dev != os.stat(b).st_dev, "bindfs must show another device, as a second node does"


def test_a_plate_converted_through_one_mount_is_zarrmills_through_the_other(cli, tmp_path, second_mount):
    a, b = second_mount
    raw = generate(cli, tmp_path / "raw")
    assert task(cli, "ingest", f"input={raw}", f"output={a / 'p.zarr'}", "min_size=16")[0] == 0
    code, _, err = task(cli, "ingest", f"input={raw}", f"output={b / 'p.zarr'}", "min_size=16")
    assert code == 0 and "already done" in err, err
    code, _, err = task(cli, "pyramid", f"input={b / 'p.zarr'}", "min_size=8")
    assert code == 0, err
    code, _, err = task(cli, "reshard", f"input={b / 'p.zarr'}", f"output={b / 'r.zarr'}")
    assert code == 0, err
    code, _, err = task(cli, "reshard", f"input={a / 'p.zarr'}", f"output={a / 'r.zarr'}")
    assert code == 0 and "already done" in err, err
    code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={raw}",
                       "--set", f"output={b / 'p.zarr'}", "--set", "channel_names=[a,b]")
    assert code == 0, err
    assert cli("check", a / "p.zarr")[0] == 0 and cli("check", b / "r.zarr")[0] == 0
    assert not (a / "p.zarr" / ".zarrmill-claim").exists(), "a finished store holds no claim"


def test_a_foreign_folder_stays_foreign_through_every_mount(cli, tmp_path, second_mount):
    a, b = second_mount
    raw = generate(cli, tmp_path / "raw")
    (a / "theirs.zarr").mkdir()
    (a / "theirs.zarr" / "data.bin").write_bytes(b"a colleague's")
    before = snapshot(a)
    for where in (a, b):
        code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={raw}",
                           "--set", f"output={where / 'theirs.zarr'}")
        assert code == 2 and "not created by zarrmill" in err, err
    assert changes(before, snapshot(a)) == []


def test_a_run_killed_through_one_mount_reruns_through_the_other_to_the_same_bytes(cli, tmp_path, second_mount):
    a, b = second_mount
    ref = tmp_path / "ref" / "img.zarr"
    assert task(cli, "generate", f"output={ref}", *BIG)[0] == 0
    sets = [x for s in BIG for x in ("--set", s)]
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "generate", "--executor", "sync",
                             "--set", f"output={a / 'img.zarr'}", *sets],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while done_units(a / "img.zarr", "generate") < 20 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < done_units(a / "img.zarr", "generate") < 2 * 4 * 16 * 16, "the kill must land mid-step"
    assert (a / "img.zarr" / ".zarrmill-claim").exists(), "killed before it finished: the store carries its claim"
    killed_at = done_units(a / "img.zarr", "generate")
    code, _, err = task(cli, "generate", f"output={b / 'img.zarr'}", *BIG)
    assert code == 0 and f"{killed_at} already done" in err, err  # resumed, not redone
    assert tree_digest(a / "img.zarr") == tree_digest(ref)


@pytest.mark.slurm
def test_slurm_workers_rewrite_through_another_mount_than_the_first_run(cli, slurm, tmp_path, second_mount):
    """A plate converted through one mount; its --overwrite run driven through the other, its units
    run by SLURM workers there."""
    from helpers import generate_step, write_workflow
    from slurm.test_slurm_executor import slurm_executor

    a, b = second_mount
    assert task(cli, "generate", f"output={a / 'img.zarr'}", "shape=[8,64,64]")[0] == 0
    step = generate_step(b / "img.zarr", shape=(8, 64, 64), chunks=(8, 32, 32), seed=7)
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": step}, executor=slurm_executor(slurm, tmp_path, jobs=1))
    code, _, err = cli("run", wf, "--overwrite")
    assert code == 0, err
    assert cli("check", a / "img.zarr")[0] == 0
    code, _, err = cli("run", wf)
    assert code == 0 and "already done" in err, err


def test_locks_ledger_and_a_whole_conversion_work_on_a_drive_without_hard_links(cli, tmp_path, fat_drive):
    from zarrmill.runtime.core.ledger import Ledger
    from zarrmill.runtime.core.locks import DatasetLock, Locked

    (fat_drive / "a").write_text("x")
    with pytest.raises(OSError):
        os.link(fat_drive / "a", fat_drive / "b")  # the precondition: no hard links here
    folder = fat_drive / ".out.zarr.zarrmill"
    folder.mkdir()
    for trial in range(5):
        held: list[DatasetLock] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(12)

        def take() -> None:
            lock = DatasetLock(folder / f"t{trial}.lock")
            barrier.wait()
            try:
                lock.acquire()
            except Locked:
                return
            except BaseException as err:  # noqa: BLE001 - every taker must win or be told it is locked
                errors.append(err)
                return
            held.append(lock)

        threads = [threading.Thread(target=take) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(held) == 1, f"trial {trial}: {len(held)} holders, errors {errors}"
        held[0].release()
        assert not (folder / f"t{trial}.lock").exists()
    led = Ledger(fat_drive / "out.zarr", "s")
    led.mark_done(["u1", "u2"])
    led.close()
    assert Ledger(fat_drive / "out.zarr", "s").done_ids() == {"u1", "u2"}
    raw = generate(cli, tmp_path / "raw")
    assert task(cli, "ingest", f"input={raw}", f"output={tmp_path / 'disk.zarr'}")[0] == 0
    code, _, err = task(cli, "ingest", f"input={raw}", f"output={fat_drive / 'p.zarr'}")
    assert code == 0, err
    code, _, err = task(cli, "ingest", f"input={raw}", f"output={fat_drive / 'p.zarr'}")
    assert code == 0 and "already done" in err, err
    assert cli("check", fat_drive / "p.zarr")[0] == 0
    assert tree_digest(fat_drive / "p.zarr") == tree_digest(tmp_path / "disk.zarr")


def test_a_run_whose_lease_was_taken_over_stops_with_one_line(tmp_path):
    """The heartbeat notices another run's lock; the engine stops between units, before it records
    or writes more (a hung node whose lease went stale and was taken over)."""
    env = {**os.environ, "ZARRMILL_LOCK_HEARTBEAT_S": "0.2"}
    out = tmp_path / "img.zarr"
    sets = [x for s in BIG for x in ("--set", s)]
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "task", "generate", "--executor", "sync",
                             "--set", f"output={out}", *sets], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lock = out.parent / ".img.zarr.zarrmill" / "lock"
    deadline = time.monotonic() + 60
    while done_units(out, "generate") < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    lock.write_text('{"host": "other-node", "pid": 1, "token": "theirs", "beat": %f}' % time.time())
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.startswith("zarrmill: error")]
    assert len(lines) == 1 and "took this run's lock over" in lines[0], err
    assert done_units(out, "generate") < 2 * 4 * 16 * 16
    assert '"theirs"' in lock.read_text(), "the lock it lost is never removed"
