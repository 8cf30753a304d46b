"""Per-dataset locks for scheduled runs that may overlap (cron fired twice, a slow run still
going, two sbatch jobs). A lock is a file created with O_CREAT | O_EXCL (atomic on local and
NFSv3+ file systems) holding host, pid and a heartbeat the holder refreshes. A lock whose holder is
dead (same host, pid gone) or whose heartbeat is older than ``stale_after`` is taken over, with a
log line; the takeover renames the stale file away first, so two takers cannot both win."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path

log = logging.getLogger("zarrmill.locks")


class Locked(Exception):
    """Another live run holds the lock."""


class DatasetLock:
    def __init__(self, path: Path, stale_after: float = 120.0, heartbeat: float = 10.0):
        self.path = Path(path)
        self.stale_after = stale_after
        self.heartbeat = heartbeat
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _create(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                       "since": time.time()}, fh)
        return True

    def holder(self) -> dict | None:
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        info["heartbeat"] = self.path.stat().st_mtime if self.path.exists() else 0.0
        return info

    def is_stale(self, info: dict | None) -> bool:
        if info is None:
            return True  # unreadable: a holder died while writing it
        if info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1))):
            return True
        return time.time() - info["heartbeat"] > self.stale_after

    def acquire(self) -> None:
        if self._create():
            return self._start_heartbeat()
        info = self.holder()
        if not self.is_stale(info):
            raise Locked(f"{self.path.name} held by {info.get('host')}:{info.get('pid')}")
        aside = self.path.with_name(f"{self.path.name}.stale.{self.token}")
        try:
            os.replace(self.path, aside)  # only one taker can move the stale lock away
        except FileNotFoundError:
            pass
        else:
            log.warning("taking over stale lock %s from %s:%s", self.path, (info or {}).get("host"),
                        (info or {}).get("pid"))
            print(f"taking over stale lock {self.path.name} (holder {(info or {}).get('host')}:"
                  f"{(info or {}).get('pid')} is gone)", flush=True)
            aside.unlink(missing_ok=True)
        if not self._create():
            raise Locked(f"{self.path.name} was taken by another run")
        self._start_heartbeat()

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
            self.path.unlink(missing_ok=True)

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
