"""Locks for runs that may overlap (cron fired twice, a slow run still going, two batch jobs on
different nodes): per dataset in scheduled runs, per output store in every run. One algorithm over
the storage backend (io/storage/backend.py), for a folder (local, NFS, Lustre, FAT, FUSE) and a
bucket prefix alike.

A lock is a key created exclusively with its whole content: holder host, pid, a token and the time
of its last heartbeat. The holder renews it every ``heartbeat`` seconds, only if it is still the
version it renewed last (a lease): a bucket's object is rewritten with ``If-Match``; a file is
touched, never rewritten (a disk has no conditional rename that could not replace a taker's lock). A
lock whose holder is dead (same host, pid gone) or whose heartbeat is older than ``stale_after`` may
be taken over. Taking over is serialised by a second exclusive key, ``<lock>.takeover``: only its
holder may judge the lock stale again, remove it and create its own, so two takers can never both
win, and a fresh lock created meanwhile by a plain acquirer is never removed (it is not stale). A
taker that dies holding ``.takeover`` blocks takeovers for ``takeover_stale`` seconds, no more.

A heartbeat that fails (a storage error, a renewal refused) is a warning and is retried at the next
beat. The lease is lost when the lock names another holder or is gone, or once no heartbeat has
taken for ``stale_after`` seconds (others may take it over from then on); then :meth:`Lease.lost` is
true: the engine checks it between units and stops the step with one line before it writes anything
more. Heartbeats come from each host's clock: hosts whose clocks differ by more than ``stale_after``
misjudge them. The host name in a lock is for people; a dead holder is recognised by its pid only
from the same kernel boot and pid namespace (:func:`process_space`)."""
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

from ...errors import StepFailedError, warn
from ...io.storage.backend import Backend, DiskBackend, backend_for
from ...io.storage.location import as_location
from ...io.storage.secrets import redact

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
        self._renewed: float | None = None  # monotonic time of the last beat that took (None: not held)
        self._why = ""  # how the lock was lost to another run
        self._problem = self._refusal = ""  # the last heartbeat's failure; why the last beat() did not take
        self._stale = False  # lost because no heartbeat took for stale_after seconds
        self._warned = False  # the one stderr line of a failing heartbeat was printed

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
        self._renewed = time.monotonic()  # the lock was just written: a beat as fresh as any
        self._thread = threading.Thread(target=self._beat_until_stopped, daemon=True)
        self._thread.start()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.heartbeat):
            started = time.monotonic()  # before the write: others judge the beat by the time in it
            try:
                problem = None if self.beat() else self._refusal
            except Exception as err:  # noqa: BLE001 - a storage hiccup: the next beat tries again
                problem = f"{type(err).__name__}: {redact(str(err))[:200]}"
            if self._stop.is_set():
                return  # released meanwhile: a beat racing the release says nothing
            if problem is None:
                self._renewed = started
            else:
                self._missed(problem)
            if self.lost():
                return

    def _missed(self, problem: str) -> None:
        """A heartbeat that did not take: one warning line per lease, a log record each time (the
        terminal shows warnings already: a record per beat there would repeat the line)."""
        self._problem = problem
        log.info("heartbeat of lock %s failed (%s); retrying every %g s", self.where, problem, self.heartbeat)
        if not self._warned:
            self._warned = True
            warn(self.where, f"the run lock's heartbeat failed ({problem}); retrying every {self.heartbeat:g} s. "
                             f"Without one for {self.stale_after:g} s the run stops (another run may take it over)")

    def beat(self) -> bool:
        """Rewrite the lock with a fresh heartbeat if it is still this holder's: True when it took.
        Another run's lock in its place, or none at all, ends the lease for good."""
        held = self.holder()
        if held is None or held.get("token") != self.token:
            if held is not None or self.backend.stat(self.name) is None:
                self._why = (f"another run ({held.get('host')}:{held.get('pid')}) holds it now" if held
                             else "it was removed")
                self._lost.set()  # this run no longer holds it
            self._refusal = self._why or "the lock could not be read whole"
            return False
        if self._version is not None and self.backend.renew(self.name, self._doc(), if_version=self._version):
            version = self.backend.stat(self.name)
            self._version = version.token if version else None
            return True
        # changed since this holder's last write (a write whose answer was lost), yet still naming
        # this holder: renewed from that version at the next beat, which reads the holder again first
        version = self.backend.stat(self.name)
        self._version = version.token if version else None
        self._refusal = "the lock changed since this run last renewed it"
        return False

    def lost(self) -> bool:
        """True once another run holds the lock, or once no heartbeat has taken for ``stale_after``
        seconds (others may judge it stale now). Judged here too, not only by the heartbeat thread:
        a beat may hang in a client's retries far longer than that."""
        if (not self._lost.is_set() and self._renewed is not None and not self._stop.is_set()
                and time.monotonic() - self._renewed > self.stale_after):
            self._stale = True
            self._lost.set()
        return self._lost.is_set()

    def check(self) -> None:
        """Raise LeaseLost when another run took this lock over, or it could not be renewed in time."""
        if not self.lost():
            return
        if self._stale and not self._why:  # another run's lock seen meanwhile says more
            raise LeaseLost(f"{self.where}: this run's lock could not be renewed for {self.stale_after:g} s "
                            f"({self._problem or 'no heartbeat answered'}); another run may take it over, so this "
                            "run stopped before writing more. Rerun once the storage answers: the units done so "
                            "far are kept")
        why = self._why or f"its heartbeat was missed for {self.stale_after:g} s"
        raise LeaseLost(f"{self.where}: another run took this run's lock over ({why}); this run stopped before "
                        "writing more. Let that run finish, then rerun to check the output")

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
                from ...errors import ConfigError

                raise ConfigError(f"{name}={value!r}: not a number of seconds") from None
    return Lease(backend_for(path.parent), path.name, **kw)
