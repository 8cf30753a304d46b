"""The storage backend (backend.py) over a local or network folder, acting by file descriptor.

A backend whose root lies in a folder zarrmill keeps for itself (a store's ``.<name>.zarrmill``)
judges that folder at every call (guard_fs.check_own_folder: a real folder, the running user's,
with zarrmill's marker) and walks below it without following links: a symlink planted there, or
swapped in while a run works, makes the call fail with one line, never act on the link's target.

Create-exclusive is a hard link of a fully written temp file (atomic on local file systems and
NFS); where links are refused, an ``O_EXCL`` create written in the same breath."""
from __future__ import annotations

import errno
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ...errors import UnsafeOutputError
from .guard_fs import (FOLDER_MARKER, check_own_folder, make_own_folder, open_below, open_folder, open_judged,
                       remove_entry,
                       replace_entry)
from .paths import checked_key, is_bookkeeping_name, never_delete

# what link(2) answers on file systems without hard links (FAT/exFAT, s3fs-fuse, rclone, some FUSE)
NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS, errno.EXDEV, errno.EACCES}
# devices where link(2) was refused, so that every backend there skips the temp file and link
# (fusefat loses folders under many concurrent temp files being made and removed). A capability of
# this process's mounts only: it never decides whether a store is zarrmill's or a lock is held.
_LINKLESS: set[int] = set()
_NEW = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Version:
    token: str  # changes whenever the content is replaced
    age: float  # seconds since the last write


def own_base(root: Path) -> Path | None:
    """The folder zarrmill keeps for itself that holds ``root`` (or is it), if any."""
    for folder in (root, *root.parents):
        if is_bookkeeping_name(folder.name):
            return folder
    return None


class DiskBackend:
    def __init__(self, root: str | os.PathLike[str],
                 judged: Callable[[], tuple[Path, tuple[int, int] | None]] | None = None):
        """``judged``: for a store's own root, its real path and identity as the guard judged them
        (the root is then entered only while it is still that folder)."""
        self.root = Path(os.path.abspath(root))
        self.base = own_base(self.root)
        self._judged = judged
        self._links = True

    def path(self, key: str) -> Path:
        return self.root / checked_key(key)

    # -- the folder a key lives in, entered without following links ----------------------------
    @contextmanager
    def _folder(self, key: str, create: bool = False) -> Iterator[tuple[int, str] | None]:
        """(descriptor of the key's folder, the key's last name), or None when that folder is absent."""
        parts = checked_key(key).split("/")
        if self.base is None:
            start, below = self.root, []
            if create:
                self.root.mkdir(parents=True, exist_ok=True)
        else:
            start, below = self.base, list(self.root.relative_to(self.base).parts)
            if not check_own_folder(self.base, "bookkeeping folder"):
                if not create:
                    yield None
                    return
                self.base.parent.mkdir(parents=True, exist_ok=True)
                make_own_folder(self.base, "bookkeeping folder")
        try:
            if self.base is None and self._judged is not None:
                fd = open_judged(*self._judged())
            else:
                fd = open_folder(start, follow=self.base is None)
                if self.base is not None and os.fstat(fd).st_uid != os.geteuid():  # swapped since it was judged
                    os.close(fd)
                    raise UnsafeOutputError(f"{self.base}: was replaced by another user's folder while zarrmill "
                                            "used it; nothing there was touched. Move it away, then rerun")
        except FileNotFoundError:
            yield None
            return
        try:
            fd = _below(fd, below + parts[:-1], create)
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    # -- the backend's operations --------------------------------------------------------------
    def create(self, key: str, data: bytes, durable: bool = True) -> bool:
        """``durable=False`` skips the fsync (ledger records, which a node crash may lose: their
        units are redone; an fsync also flushes every chunk the units just wrote)."""
        for _ in range(2):
            try:
                return self._create(key, data, durable)
            except FileNotFoundError:  # fusefat, under many creates at once, loses a folder's descriptor
                pass
        return self._create(key, data, durable)

    def _create(self, key: str, data: bytes, durable: bool) -> bool:
        with self._folder(key, create=True) as found:
            fd, name = found
            if self._links and os.fstat(fd).st_dev in _LINKLESS:
                self._links = False  # another backend found this file system has no hard links
            if self._links:
                tmp = f"{name}.{uuid.uuid4().hex}.partial"
                _write_synced(os.open(tmp, _NEW, 0o644, dir_fd=fd), data, self.path(key), durable, undo=(fd, tmp))
                try:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                    return True
                except FileExistsError:
                    return False
                except OSError as err:
                    if err.errno not in NO_HARD_LINKS:
                        raise
                    self._links = False  # this file system has no hard links: create-exclusive below
                    _LINKLESS.add(os.fstat(fd).st_dev)
                finally:
                    _unlink_quiet(fd, tmp)
            try:
                out = os.open(name, _NEW, 0o644, dir_fd=fd)
            except FileExistsError:
                return False
            _write_synced(out, data, self.path(key), durable, undo=(fd, name))
            return True

    def read(self, key: str) -> bytes | None:
        with self._folder(key) as found:
            if found is None:
                return None
            try:
                fh = os.open(found[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=found[0])
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as err:
                if err.errno == errno.ELOOP:  # a link where zarrmill keeps a file of its own: not read
                    return None
                raise
            with open(fh, "rb") as stream:
                return stream.read()

    def stat(self, key: str) -> Version | None:
        with self._folder(key) as found:
            if found is None:
                return None
            try:
                st = os.stat(found[1], dir_fd=found[0], follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
        return Version(f"{st.st_mtime_ns}-{st.st_size}", time.time() - st.st_mtime)

    def replace(self, key: str, data: bytes, if_version: str | None = None) -> bool:
        """Whole content through a rename; ``if_version``: only if unchanged since that version
        (checked just before the rename: disks have no conditional rename)."""
        if if_version is not None:
            now = self.stat(key)
            if now is None or now.token != if_version:
                return False
        with self._folder(key, create=True) as found:
            fd, name = found
            tmp = f"{name}.{uuid.uuid4().hex}.partial"
            _write_synced(os.open(tmp, _NEW, 0o644, dir_fd=fd), data, self.path(key), True, undo=(fd, tmp))
            try:
                replace_entry(fd, tmp, name)  # replaces a link itself, never its target
            except BaseException:
                _unlink_quiet(fd, tmp)
                raise
        return True

    def renew(self, key: str, data: bytes, if_version: str) -> bool:
        """A lease's heartbeat: its modification time, if it is still that version. The content is
        never rewritten on disk: a check-then-rename could replace another run's lock created in
        between; a touch at worst freshens it."""
        now = self.stat(key)
        if now is None or now.token != if_version:
            return False
        with self._folder(key) as found:
            if found is None:
                return False
            os.utime(found[1], dir_fd=found[0], follow_symlinks=False)
        return True

    def any_under(self, prefix: str) -> bool:
        with self._folder(f"{prefix}/x") as found:  # the prefix's own folder (x: a name in it)
            return found is not None and bool(os.listdir(found[0]))

    def keys(self, prefix: str = "") -> list[str]:
        """Every file under ``prefix``, never through a link (temp files left out)."""
        with self._folder(f"{prefix}/x" if prefix else "x") as found:
            if found is None:
                return []
            out = []
            top = prefix + "/" if prefix else ""
            for dirpath, _, names, _fd in os.fwalk(".", dir_fd=found[0], follow_symlinks=False):
                rel = os.path.relpath(dirpath, ".").replace(os.sep, "/")
                at = top if rel == "." else f"{top}{rel}/"
                out += [at + n for n in names if not n.endswith(".partial") and n != FOLDER_MARKER]
        return sorted(out)

    def delete(self, keys: Iterable[str]) -> None:
        """Zarrmill's own bookkeeping files, by name (a link goes, never what it points to)."""
        for key in keys:
            never_delete(self.path(key))
            with self._folder(key) as found:
                if found is not None:
                    remove_entry(found[0], found[1], tree=True, links=False, where=self.path(key))


def _below(fd: int, parts: list[str], create: bool) -> int:
    """``open_below`` from ``fd``, which is closed."""
    try:
        return open_below(fd, parts, create)
    finally:
        os.close(fd)


def _unlink_quiet(fd: int, name: str) -> None:
    try:
        remove_entry(fd, name, tree=False)
    except OSError:
        pass


def _write_synced(out: int, data: bytes, path: Path, durable: bool = True, undo: tuple[int, str] | None = None) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        if durable:
            os.fsync(out)
    except BaseException as err:
        os.close(out)
        if undo is not None:
            _unlink_quiet(*undo)  # never an empty or half-written file left under that name
        if type(err) is OSError and err.filename is None:  # write() and fsync() name no file (a full disk)
            err.filename = str(path)
        raise
    os.close(out)
