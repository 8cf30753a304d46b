"""Locks and run history that hold with many concurrent takers: exactly one holder every time,
also when the lock left behind is stale (its holder died)."""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from zarrmill.runtime.core.history import History
from zarrmill.runtime.core.locks import DatasetLock, Locked, process_space

TAKERS = 30


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid  # reaped: no process has this pid now (pids are not reused this quickly)


def _leave_stale_lock(path: Path) -> None:
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "token": "dead", "since": 0,
                                "space": process_space()}))


def _locks(tmp_path: Path) -> Path:
    """Locks live in zarrmill's bookkeeping folders (an output's .zarrmill, a state folder)."""
    from zarrmill.io.storage.guard_fs import make_own_folder

    folder = tmp_path / ".out.zarr.zarrmill"
    make_own_folder(folder)  # as zarrmill makes it: with its marker
    return folder


def _try(path: Path) -> DatasetLock | None:
    lock = DatasetLock(path, stale_after=60)
    try:
        lock.acquire()
    except Locked:
        return None
    return lock


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_thirty_threads_exactly_one_holder_every_trial(tmp_path, stale):
    for trial in range(30):
        path = _locks(tmp_path) / f"t{trial}.lock"
        if stale:
            _leave_stale_lock(path)
        barrier = threading.Barrier(TAKERS)
        held: list[DatasetLock] = []
        guard = threading.Lock()

        def take() -> None:
            barrier.wait()
            lock = _try(path)
            if lock is not None:
                with guard:
                    held.append(lock)

        threads = [threading.Thread(target=take) for _ in range(TAKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(held) == 1, f"trial {trial}: {len(held)} holders"
        assert json.loads(path.read_text())["token"] == held[0].token
        held[0].release()
        assert not path.exists() and not path.with_name(path.name + ".takeover").exists()


def _process_taker(path: str, barrier, results, done) -> None:
    barrier.wait()  # every taker is up before any tries
    lock = _try(Path(path))
    results.put(os.getpid() if lock is not None else 0)
    done.wait()  # the winner holds until every taker has tried
    if lock is not None:
        lock.release()


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_thirty_processes_exactly_one_holder(tmp_path, stale):
    ctx = multiprocessing.get_context("spawn")  # fork from a threaded pytest process can deadlock
    for trial in range(3):
        path = _locks(tmp_path) / f"p{trial}.lock"
        if stale:
            _leave_stale_lock(path)
        barrier, results, done = ctx.Barrier(TAKERS), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_process_taker, args=(str(path), barrier, results, done)) for _ in range(TAKERS)]
        for p in procs:
            p.start()
        winners = [pid for pid in (results.get(timeout=120) for _ in procs) if pid]
        done.set()
        for p in procs:
            p.join(60)
        assert len(winners) == 1, f"trial {trial}: {len(winners)} holders"


def test_a_live_holder_is_never_taken_over_and_a_dead_one_is(tmp_path):
    path = _locks(tmp_path) / "x.lock"
    first = _try(path)
    assert first is not None and _try(path) is None
    first.release()
    _leave_stale_lock(path)
    second = _try(path)
    assert second is not None
    second.release()


def test_history_records_are_whole_files_and_latest_wins(tmp_path):
    h = History(tmp_path / "state")
    h.waiting("plate 1", "/data/plate 1", "waiting for marker")
    h.waiting("plate 1", "/data/plate 1", "still waiting")
    run = h.start("plate 1", "/data/plate 1", "wf", "in", 10)
    h.end(run, "failed", error="boom")
    assert [r.status for r in h.all()] == ["waiting", "failed"]
    assert h.latest("plate 1").error == "boom"
    assert h.requeue_failed() == ["plate 1"] and h.latest("plate 1").status == "queued"
    assert (tmp_path / "state" / ".zarrmill-state").is_file()  # marks the folder as zarrmill's
    files = list((tmp_path / "state" / "history").rglob("*"))
    assert all(f.suffix == ".json" for f in files if f.is_file())
    for f in files:
        if f.is_file():
            json.loads(f.read_text())


def test_bookkeeping_removal_refuses_what_is_not_zarrmills(tmp_path, monkeypatch):
    """Ledger records, locks and run folders go through the output guard: outside a store's bookkeeping folder
    folder or a marked folder nothing is removed."""
    from zarrmill.errors import UnsafeOutputError
    from zarrmill.io.storage.guard import remove_bookkeeping

    user = tmp_path / "my-data"
    user.mkdir()
    (user / "notes.lock").write_text("mine")
    for target in (user / "notes.lock", user):
        with pytest.raises(UnsafeOutputError, match="not in a folder zarrmill keeps"):
            remove_bookkeeping(target)
    assert (user / "notes.lock").read_text() == "mine"
    state = tmp_path / "state"
    History(state)
    (state / "locks").mkdir()
    (state / "locks" / "a.lock").write_text("{}")
    remove_bookkeeping(state / "locks" / "a.lock")
    assert not (state / "locks" / "a.lock").exists()
    monkeypatch.chdir(state)
    with pytest.raises(UnsafeOutputError, match="refusing to delete"):
        remove_bookkeeping(state)  # the current folder, even though it is marked


def test_the_heartbeat_rides_out_storage_errors_and_notices_a_takeover(tmp_path):
    """A storage hiccup (an NFS server restarting) costs a beat, not the lease; another run's lock
    in its place ends the lease for good."""
    import time

    from zarrmill.runtime.core.locks import LeaseLost

    path = _locks(tmp_path) / "x.lock"
    lock = DatasetLock(path, heartbeat=0.05, stale_after=60)
    failures = {"left": 3}
    real_renew = lock.backend.renew

    def flaky_renew(*args, **kw):
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(5, "Input/output error")  # what a client sees while its server restarts
        return real_renew(*args, **kw)

    lock.backend.renew = flaky_renew
    lock.acquire()
    deadline = time.monotonic() + 10
    while failures["left"] and time.monotonic() < deadline:
        time.sleep(0.02)
    first = os.stat(path).st_mtime_ns
    time.sleep(0.3)
    assert os.stat(path).st_mtime_ns > first, "beats go on after the errors"
    assert not lock.lost()
    lock.check()
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "theirs", "beat": time.time()}))
    deadline = time.monotonic() + 10
    while not lock.lost() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(LeaseLost):
        lock.check()
    lock.release()
    assert json.loads(path.read_text())["token"] == "theirs"


def test_a_holder_on_another_node_with_the_same_host_name_is_never_judged_dead(tmp_path):
    """Containers and nodes may all call themselves the same (``localhost``): a pid that is not
    alive here says nothing about a holder in another kernel or pid namespace. Only its heartbeat's
    age can make it stale."""
    import time

    path = _locks(tmp_path) / "x.lock"
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "token": "theirs",
                                "beat": time.time(), "space": "another-boot/pid:[4026531836]"}))
    assert _try(path) is None
    assert json.loads(path.read_text())["token"] == "theirs"


def test_a_create_without_hard_links_leaves_nothing_when_its_write_fails(tmp_path, monkeypatch):
    """The O_EXCL fallback (FAT, FUSE): a failed write removes the file it just made, names it in
    the error, and never touches a file that was already there."""
    import errno

    from zarrmill.io.storage.backend import DiskBackend

    backend = DiskBackend(_locks(tmp_path))
    backend._links = False  # as on a file system that refused link()
    (backend.root / "held").write_text("someone's")
    assert not backend.create("held", b"mine")
    assert (backend.root / "held").read_text() == "someone's"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("zarrmill.io.storage.disk_backend.os.fsync", full)
    with pytest.raises(OSError) as err:
        backend.create("new", b"mine")
    assert err.value.filename == str(backend.root / "new")
    assert sorted(p.name for p in backend.root.iterdir()) == [".zarrmill-folder", "held"]
