"""Locks for runs that may overlap (cron fired twice, a slow run still going, two sbatch jobs on
different nodes): per dataset in scheduled runs, per output store in every run.

A lock is a file hard-linked into place, create-only, holder already written (atomic on local file systems and NFS),
holding host, pid and a token; its holder refreshes the file's mtime as a heartbeat (a lease). A
lock whose holder is dead (same host, pid gone) or whose heartbeat is older than ``stale_after`` may
be taken over. Taking over is serialised by a second exclusive file, ``<lock>.takeover``: only its
holder may judge the lock stale again, remove it and create its own, so two takers can never both
win, and a fresh lock created meanwhile by a plain acquirer is never removed (it is not stale). A
taker that dies holding ``.takeover`` blocks takeovers for ``takeover_stale`` seconds, no more.
Locks live in zarrmill's bookkeeping folders (a store's ``.<name>.zarrmill`` beside it, a state folder) and are
removed only through the output guard's ``remove_bookkeeping``."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from ..io.storage.guard import remove_bookkeeping
from ..io.storage.location import Location, as_location, is_remote
from ..io.storage.object_store import delete_keys, get, json_bytes, key_of, put

log = logging.getLogger("zarrmill.locks")
UNREADABLE_GRACE = 5.0  # seconds an empty or torn lock file is given before it counts as stale


class Locked(Exception):
    """Another live run holds the lock."""


class DatasetLock:
    def __init__(self, path: Path, stale_after: float = 120.0, heartbeat: float = 10.0,
                 takeover_stale: float = 30.0):
        self.path = Path(path)
        self.takeover_path = self.path.with_name(self.path.name + ".takeover")
        self.stale_after = stale_after
        self.heartbeat = heartbeat
        self.takeover_stale = takeover_stale
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _create(self, path: Path) -> bool:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the holder is written first, then hard-linked into place (create-only, atomic on local
        # file systems and NFS): a kill can never leave a lock file without its holder, which no
        # rerun could take over before the lease went stale (tests/test_kill.py found one)
        tmp = path.with_name(f"{path.name}.{self.token}.{os.getpid()}.partial")
        with open(tmp, "w") as fh:
            json.dump({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                       "since": time.time()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def holder(self) -> dict | None:
        try:
            info = json.loads(self.path.read_text())
            info["heartbeat"] = self.path.stat().st_mtime
        except (OSError, ValueError, TypeError):
            return None
        return info if isinstance(info, dict) else None

    def is_stale(self, info: dict | None) -> bool:
        if info is None:
            # unreadable: a holder is writing it this instant (microseconds), or died while writing it
            try:
                return time.time() - self.path.stat().st_mtime > min(self.stale_after, UNREADABLE_GRACE)
            except OSError:
                return True
        if info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1))):
            return True
        return time.time() - info["heartbeat"] > self.stale_after

    def acquire(self) -> None:
        if self._create(self.path):
            return self._start_heartbeat()
        info = self.holder()
        if not self.is_stale(info):
            raise Locked(f"{self.path.name} held by {(info or {}).get('host')}:{(info or {}).get('pid')}")
        if not self._create(self.takeover_path):
            self._clear_dead_takeover()
            raise Locked(f"{self.path.name} is being taken over by another run")
        try:
            info = self.holder()  # judged again, now that no one else can take it over
            if self.path.exists() and self.is_stale(info):
                print(f"taking over stale lock {self.path.name} (holder {(info or {}).get('host')}:"
                      f"{(info or {}).get('pid')} is gone)", flush=True)
                log.warning("taking over stale lock %s", self.path)
                remove_bookkeeping(self.path)
            if not self._create(self.path):
                raise Locked(f"{self.path.name} was taken by another run")
        finally:
            remove_bookkeeping(self.takeover_path)
        self._start_heartbeat()

    def _clear_dead_takeover(self) -> None:
        try:
            if time.time() - self.takeover_path.stat().st_mtime > self.takeover_stale:
                remove_bookkeeping(self.takeover_path)
        except OSError:
            pass

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.heartbeat):
                try:
                    os.utime(self.path)
                except OSError:
                    return
        self._thread = threading.Thread(target=beat, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        info = self.holder()
        if info and info.get("token") == self.token:
            remove_bookkeeping(self.path)

    def __enter__(self) -> "DatasetLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ObjectLock:
    """The run lock of a store in a bucket (io/storage/object_store.py): a create-only object holding
    its holder and a heartbeat time the holder rewrites with ``If-Match`` on the object's ETag (an
    object store has no mtime to touch); stale by the heartbeat's age or a dead holder on this
    host, taken over through a create-only ``lock.takeover`` object, as on disk. Heartbeats come
    from each host's clock: hosts whose clocks differ by more than ``stale_after`` misjudge them."""

    def __init__(self, path: Location, stale_after: float = 120.0, heartbeat: float = 10.0,
                 takeover_stale: float = 30.0):
        self.path = as_location(str(path))
        self.takeover_path = self.path.parent / (self.path.name + ".takeover")
        self.stale_after, self.heartbeat, self.takeover_stale = stale_after, heartbeat, takeover_stale
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _holder_doc(self) -> bytes:
        return json_bytes({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token, "beat": time.time()})

    def _create(self, path: Location) -> bool:
        try:
            put(path, self._holder_doc(), create_only=True)
        except FileExistsError:
            return False
        return True

    def holder(self) -> dict | None:
        data = get(self.path)
        try:
            info = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return info if isinstance(info, dict) else None

    def is_stale(self, info: dict | None) -> bool:
        if info is None:
            return True  # unreadable: a whole-object PUT is never torn, so this is garbage
        if info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1))):
            return True
        return time.time() - float(info.get("beat", 0)) > self.stale_after

    def acquire(self) -> None:
        if self._create(self.path):
            return self._start_heartbeat()
        info = self.holder()
        if not self.is_stale(info):
            raise Locked(f"{self.path.name} held by {(info or {}).get('host')}:{(info or {}).get('pid')}")
        if not self._create(self.takeover_path):
            self._clear_dead_takeover()
            raise Locked(f"{self.path.name} is being taken over by another run")
        try:
            info = self.holder()
            if self.is_stale(info):
                print(f"taking over stale lock {self.path.name} (holder {(info or {}).get('host')}:"
                      f"{(info or {}).get('pid')} is gone)", flush=True)
                delete_keys(self.path, [key_of(self.path)])
            if not self._create(self.path):
                raise Locked(f"{self.path.name} was taken by another run")
        finally:
            delete_keys(self.path, [key_of(self.takeover_path)])
        self._start_heartbeat()

    def _clear_dead_takeover(self) -> None:
        data = get(self.takeover_path)
        try:
            beat = float(json.loads(data).get("beat", 0)) if data else 0.0
        except ValueError:
            beat = 0.0
        if time.time() - beat > self.takeover_stale:
            delete_keys(self.path, [key_of(self.takeover_path)])

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.heartbeat):
                try:
                    info = self.path.fs.info(key_of(self.path), refresh=True)
                    held = self.holder()
                    if not held or held.get("token") != self.token:
                        return  # taken over: the run will fail on its own lock check
                    put(self.path, self._holder_doc(), IfMatch=info.get("ETag", "*"))
                except Exception:  # noqa: BLE001 - a missed beat is retried; a lost lock ends the beats
                    continue
        self._thread = threading.Thread(target=beat, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        info = self.holder()
        if info and info.get("token") == self.token:
            delete_keys(self.path, [key_of(self.path)])


def open_lock(path) -> "DatasetLock | ObjectLock":
    return ObjectLock(path) if is_remote(path) else DatasetLock(path)
