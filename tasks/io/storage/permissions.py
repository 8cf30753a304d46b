"""Who may change a store while zarrmill writes it.

On a lab's group-writable share (a setgid folder, everyone with umask 002) every folder zarrmill
made was group-writable too, so a colleague could rename a folder of the store being written and
put a link to anywhere in its place between zarrmill's check and its writes. So every process of a
run (the driver and each worker) creates files and folders without group and other write, whatever
the user's umask says: nobody else can then rename, replace or add anything inside a store while
zarrmill writes it (its owner and root excepted). The store root's own name sits in the shared
folder, and a rename of it is harmless: pixels are written through a handle of the array's folder
opened once (arrays.py), which a rename cannot move.

A lab that wants group-writable stores all the same sets ``ZARRMILL_GROUP_WRITABLE=1``: the user's
umask is then kept, and those colleagues are trusted not to swap folders mid-run."""
from __future__ import annotations

import os
import threading

GROUP_WRITABLE = "ZARRMILL_GROUP_WRITABLE"
PRIVATE_FILE_MODE = 0o600  # logs: tracebacks, paths and host names are the user's own
_done = False
_LOCK = threading.Lock()


def group_writable() -> bool:
    return os.environ.get(GROUP_WRITABLE, "").strip().lower() in ("1", "true", "yes")


def keep_writes_private() -> int:
    """Add group and other write to this process's umask (once per process; the module doc); the
    umask set, or -1 when nothing was done."""
    global _done
    if _done or group_writable():
        return -1  # done already (or not wanted): the umask is not touched, not even read
    with _LOCK:
        if _done:
            return -1
        current = _umask_of_process()
        if current is None:  # reading it means setting it: for that instant the strictest one
            current = os.umask(0o077)
        tightened = current | 0o022
        os.umask(tightened)
        _done = True
        return tightened


def _umask_of_process() -> int | None:
    """The umask as Linux shows it (``Umask:`` of /proc/self/status), read without changing it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """A file zarrmill keeps for the user alone (a log), created 0600 and never through a link; an
    existing one is narrowed to 0600 too."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd
