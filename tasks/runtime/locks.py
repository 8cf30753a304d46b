"""Locks for runs that may overlap (cron fired twice, a slow run still going, two sbatch jobs on
different nodes): per dataset in scheduled runs, per output store in every run. One algorithm over
the storage backend (io/storage/backend.py), for a folder (local, NFS, Lustre, FAT, FUSE) and a
bucket prefix alike.

A lock is a key created exclusively with its whole content: holder host, pid, a token and the time
of its last heartbeat. The holder renews it every ``heartbeat`` seconds, only if it is still the
version it renewed last (a lease): a bucket's object is rewritten with ``If-Match``; a file is
touched, never rewritten (a disk has no conditional rename that could not replace a taker's lock). A lock whose holder is dead (same host, pid gone) or whose
heartbeat is older than ``stale_after`` may be taken over. Taking over is serialised by a second
exclusive key, ``<lock>.takeover``: only its holder may judge the lock stale again, remove it and
create its own, so two takers can never both win, and a fresh lock created meanwhile by a plain
acquirer is never removed (it is not stale). A taker that dies holding ``.takeover`` blocks
takeovers for ``takeover_stale`` seconds, no more.

The heartbeat rides out transient storage errors (it retries at the next beat); it stops for good
only when the lock names another holder, and then :meth:`Lease.lost` is true: the engine checks it
between units and stops the step with one line before it writes anything more. Heartbeats come from
each host's clock: hosts whose clocks differ by more than ``stale_after`` misjudge them. The host
name in a lock is for people; a dead holder is recognised by its pid only from the same kernel boot
and pid namespace (:func:`process_space`)."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import StepFailedError
from ..io.storage.backend import Backend, DiskBackend, backend_for
from ..io.storage.location import as_location

log = logging.getLogger("zarrmill.locks")
UNREADABLE_GRACE = 5.0  # seconds an empty or torn lock is given before it counts as stale


class Locked(Exception):
    """Another live run holds the lock."""


class LeaseLost(StepFailedError):
    """Another run took this run's lock over (its heartbeat was missed): this run stops writing."""


class Lease:
    def __init__(self, backend: Backend, name: str, stale_after: float = 120.0, heartbeat: float = 10.0,
                 takeover_stale: float = 30.0):
        self.backend, self.name, self.takeover_name = backend, name, name + ".takeover"
        self.stale_after, self.heartbeat, self.takeover_stale = stale_after, heartbeat, takeover_stale
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None
        self._version: str | None = None  # of the lock as this holder last wrote it

    @property
    def where(self) -> str:
        return f"{self.backend.root}/{self.name}"

    def _doc(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                           "beat": time.time(), "space": process_space()}).encode()

    def _create(self, name: str) -> bool:
        return self.backend.create(name, self._doc())

    def holder(self) -> dict | None:
        """The lock's content, or None when it cannot be read whole this instant (being written:
        some FUSE file systems refuse a read while another process writes the file)."""
        try:
            info = json.loads(self.backend.read(self.name) or b"")
        except FileNotFoundError:
            return None
        except (ValueError, PermissionError, BlockingIOError, InterruptedError):
            return None
        return info if isinstance(info, dict) else None

    def is_stale(self, info: dict | None) -> bool:
        version = self.backend.stat(self.name)
        if version is None:
            return True
        if info is None:  # empty or torn: a holder writing it this instant, or one that died while writing
            return version.age > min(self.stale_after, UNREADABLE_GRACE)
        if process_space() and info.get("space") == process_space() and not _pid_alive(int(info.get("pid", -1))):
            return True  # a holder this kernel can see, and it is gone

        beat = info.get("beat")  # the holder's clock; the storage's own time says when it was last renewed
        age = min(time.time() - float(beat), version.age) if isinstance(beat, (int, float)) else version.age
        return age > self.stale_after

    def acquire(self) -> None:
        if self._create(self.name):
            return self._start_heartbeat()
        info = self.holder()
        if not self.is_stale(info):
            raise Locked(f"{self.name} held by {(info or {}).get('host')}:{(info or {}).get('pid')}")
        if not self._create(self.takeover_name):
            self._clear_dead_takeover()
            raise Locked(f"{self.name} is being taken over by another run")
        try:
            info = self.holder()  # judged again, now that no one else can take it over
            if self.backend.stat(self.name) is not None and self.is_stale(info):
                print(f"taking over stale lock {self.name} (holder {(info or {}).get('host')}:"
                      f"{(info or {}).get('pid')} is gone)", flush=True)
                log.warning("taking over stale lock %s", self.where)
                self.backend.delete([self.name])
            if not self._create(self.name):
                raise Locked(f"{self.name} was taken by another run")
        finally:
            self.backend.delete([self.takeover_name])
        self._start_heartbeat()

    def _clear_dead_takeover(self) -> None:
        version = self.backend.stat(self.takeover_name)
        if version is not None and version.age > self.takeover_stale:
            self.backend.delete([self.takeover_name])

    def _start_heartbeat(self) -> None:
        version = self.backend.stat(self.name)
        self._version = version.token if version else None
        self._thread = threading.Thread(target=self._beat_until_stopped, daemon=True)
        self._thread.start()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self.beat()
            except Exception as err:  # noqa: BLE001 - a storage hiccup: the next beat tries again
                log.debug("heartbeat of %s failed (%s: %s); retrying", self.where, type(err).__name__, err)
            if self._lost.is_set():
                return

    def beat(self) -> None:
        """Rewrite the lock with a fresh heartbeat if it is still this holder's; note a takeover."""
        held = self.holder()
        if held is None or held.get("token") != self.token:
            if held is not None or self.backend.stat(self.name) is None:
                self._lost.set()  # another run's lock, or none at all: this run no longer holds it
            return
        if self._version is not None and self.backend.renew(self.name, self._doc(), if_version=self._version):
            version = self.backend.stat(self.name)
            self._version = version.token if version else None
        else:  # changed since our last write (another holder's write raced ours): judged at the next beat
            version = self.backend.stat(self.name)
            self._version = version.token if version else None

    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise LeaseLost when another run took this lock over."""
        if self._lost.is_set():
            raise LeaseLost(f"{self.where}: another run took this run's lock over (its heartbeat was missed for "
                            f"{self.stale_after:.0f} s); this run stopped before writing more. Let that run finish, "
                            "then rerun to check the output")

    def release(self) -> None:
        self._stop.set()
        info = self.holder()
        if info and info.get("token") == self.token:
            self.backend.delete([self.name])

    def __enter__(self) -> "Lease":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class DatasetLock(Lease):
    """A lock file in a local (or network) bookkeeping folder: ``DatasetLock(folder / "x.lock")``."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any):
        self.path = Path(path)
        self.takeover_path = self.path.with_name(self.path.name + ".takeover")
        super().__init__(DiskBackend(self.path.parent), self.path.name, **kw)


def process_space() -> str:
    """Which processes a pid names here: this boot of this kernel and this pid namespace. A lock's
    holder is judged dead by its pid only from the same space; host names may repeat across
    nodes and containers (``localhost``), and another node's pid means nothing here. '' where
    Linux does not say (then only the heartbeat's age decides)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


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


def open_lock(path: Any, **kw: Any) -> Lease:
    """The run lock at ``path`` (a file beside a store, or an object beside one in a bucket). Its
    timing can be set for a site (or a test) with ZARRMILL_LOCK_HEARTBEAT_S (10) and
    ZARRMILL_LOCK_STALE_S (120): stale must stay well above the heartbeat."""
    path = as_location(str(path))
    for name, key in (("ZARRMILL_LOCK_HEARTBEAT_S", "heartbeat"), ("ZARRMILL_LOCK_STALE_S", "stale_after")):
        value = os.environ.get(name)
        if value:
            try:
                kw.setdefault(key, float(value))
            except ValueError:
                from ..errors import ConfigError

                raise ConfigError(f"{name}={value!r}: not a number of seconds") from None
    return Lease(backend_for(path.parent), path.name, **kw)
