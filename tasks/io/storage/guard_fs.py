"""The guard's hands on disk: every delete, rename and walk zarrmill makes, judged at the moment it
acts. The rules of what may go live in guard.py and paths.py; this module is where they touch the
file system, with guard_empty.py (a failed plan's store emptied of the user's own files) the only
modules in the package that call unlink, rmdir, rmtree or rename (a test walks the source and
holds them to that: tests/test_deletes_in_one_place.py).

- A folder zarrmill keeps for itself (a store's ``.<name>.zarrmill``, a build store, scratch) is
  judged with ``lstat``: a real folder (never a symlink), owned by the running user, carrying
  zarrmill's marker (:data:`FOLDER_MARKER`; a folder from before the marker, or one another run is
  making this instant, counts when it holds only names zarrmill gives its own files). Anything else there is one line, exit 2, and nothing
  is deleted.
- Below a folder that was judged, every step is taken by file descriptor with ``O_NOFOLLOW``: a
  neighbour who swaps a folder for a link between the check and the act makes the act fail, never
  reach the link's target.
- A folder is removed with ``rmdir``: only when empty, so whatever anyone put in it stops it.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterator, Pattern

from ...errors import UnsafeOutputError, warn

FOLDER_MARKER = ".zarrmill-folder"  # in every folder zarrmill makes for itself: "this one is mine"
# what zarrmill keeps in a store's bookkeeping folder (besides locks, temp files, packed.* and the
# bookkeeping of a build store): a folder holding only these is zarrmill's even without the marker
OWN_NAMES = {"owner.json", "created.log", "created", "steps", "build.zarr", "scratch"}
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _refuse(path: os.PathLike[str] | str, what: str, why: str) -> UnsafeOutputError:
    return UnsafeOutputError(f"{path}: {why}, where zarrmill keeps its {what}; nothing there was touched. Move it "
                             "away (it may be a colleague's), or choose another output")


def check_own_folder(path: os.PathLike[str] | str, what: str = "own folder", marked: bool = True) -> bool:
    """True when ``path`` is a folder zarrmill made (lstat: a real folder, the running user's, with
    zarrmill's marker when ``marked``); False when nothing is there; refused otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, what, f"is a symbolic link (to {os.readlink(path)})")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, what, "is a file, not a folder")
    if st.st_uid != os.geteuid():
        raise _refuse(path, what, f"belongs to user id {st.st_uid}, not to you ({os.geteuid()})")
    if marked and not _marked(path):
        raise _refuse(path, what, f"is a folder zarrmill did not make (it lacks {FOLDER_MARKER})")
    return True


def _marked(path: os.PathLike[str] | str) -> bool:
    """The marker is there; or everything there is a name zarrmill gives its own files (a folder
    made before markers, or one another run is making this instant), and the marker is added now.
    Judged by descriptor: the folder cannot be swapped in between."""
    fd = open_folder(path)
    try:
        if _regular(fd, FOLDER_MARKER):  # the common case: no listing (some FUSE drives list badly under load)
            return True
        names = os.listdir(fd)
        if FOLDER_MARKER in names:  # made since the look above (by a run starting this instant)
            return _regular(fd, FOLDER_MARKER)
        if not all(_own_name(n) for n in names):
            return False
        _write_marker(fd)
        return True
    finally:
        os.close(fd)


def _own_name(name: str) -> bool:
    return (name in OWN_NAMES or name.endswith((".partial", ".zarrmill", ".takeover", ".lock"))
            or name.startswith("packed.") or name.split(".", 1)[0] == "lock")


def _regular(fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _write_marker(fd: int) -> None:
    try:
        os.close(os.open(FOLDER_MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644, dir_fd=fd))
    except FileExistsError:
        pass


def is_regular(path: os.PathLike[str] | str) -> bool:
    """A regular file is at ``path`` this instant (a link to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def lstat_dir(path: os.PathLike[str] | str) -> bool:
    """A real folder is at ``path`` this instant (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def make_own_folder(path: os.PathLike[str] | str, what: str = "own folder") -> bool:
    """mkdir ``path`` with zarrmill's marker (parents must exist); True if this call made it. A
    folder already there must pass :func:`check_own_folder`."""
    try:
        os.mkdir(path, 0o755)  # whatever the umask: only its owner writes in it
    except FileExistsError:
        check_own_folder(path, what)
        return False
    fd = open_folder(path)
    try:
        _write_marker(fd)
    finally:
        os.close(fd)
    return True


def open_folder(path: os.PathLike[str] | str, follow: bool = False) -> int:
    """A descriptor of the folder ``path``; its last part is never followed unless ``follow``."""
    try:
        return os.open(path, _DIR | (0 if follow else os.O_NOFOLLOW))
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise _refuse(path, "files", "is a symbolic link") from None
        raise


def open_below(base_fd: int, parts: list[str], create: bool = False) -> int:
    """Descend from ``base_fd`` through ``parts``, never following a link (made where missing when
    ``create``); a new descriptor."""
    fd = os.dup(base_fd)
    for part in parts:
        if part in ("", ".", "..") or "/" in part:
            os.close(fd)
            raise UnsafeOutputError(f"{part!r}: not a plain folder name; zarrmill never walks through it")
        try:
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR) or not _is_link(fd, part):
                raise
            raise UnsafeOutputError(f"{part}: a symbolic link where zarrmill expects a folder of its own; nothing "
                                    "was read or deleted through it. Remove the link yourself (it may be a "
                                    "colleague's)") from None
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _split(base: Path, path: os.PathLike[str] | str) -> list[str]:
    rel = os.path.relpath(os.path.abspath(path), base)
    parts = [] if rel == "." else rel.split(os.sep)
    if parts[:1] == [".."]:
        raise UnsafeOutputError(f"{path}: outside {base}; zarrmill never deletes there")
    return parts


def remove(base: os.PathLike[str] | str, path: os.PathLike[str] | str, tree: bool = True, links: bool = True,
           identity: tuple[int, int] | None = None) -> bool:
    """Delete ``path`` (below the judged folder ``base``): a file or link by name, a folder whole
    (``tree``, never through a link inside it) or only when empty. ``base`` is entered without
    following a link (pass its real path) and, with ``identity`` (device, inode, as judged), only if
    it is still that folder; every folder below is entered without following links. False if
    nothing was there."""
    base = Path(os.path.abspath(base))
    parts = _split(base, path)
    if not parts:
        raise UnsafeOutputError(f"{path}: is the folder the delete was judged from; never deleted whole here")
    try:
        root = open_judged(base, identity)
    except FileNotFoundError:
        return False
    try:
        try:
            fd = open_below(root, parts[:-1])
        except (FileNotFoundError, NotADirectoryError):
            return False
    finally:
        os.close(root)
    try:
        return remove_entry(fd, parts[-1], tree, links, where=path)
    finally:
        os.close(fd)


def identity_of(path: os.PathLike[str] | str) -> tuple[int, int] | None:
    """(device, inode) of the folder at ``path`` this instant (links not followed), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def open_judged(path: os.PathLike[str] | str, identity: tuple[int, int] | None = None) -> int:
    """A descriptor of the folder ``path`` (its last part never followed), refused unless it is
    still the folder judged earlier (``identity``): a folder swapped for a link or for another
    folder between the check and the act is never acted on. The device and inode are compared
    within one process, through one mount, seconds apart: they never decide whether a store is
    zarrmill's (that is what it carries, ownership.py), only whether this is still the same folder."""
    fd = open_folder(path)
    st = os.fstat(fd)
    if identity is not None and (st.st_dev, st.st_ino) != identity:
        os.close(fd)
        raise _refuse(path, "files", "is no longer the folder zarrmill checked (it was replaced while the run worked)")
    return fd


def remove_entry(fd: int, name: str, tree: bool, links: bool = True, where: object = None) -> bool:
    """Delete ``name`` in the folder held by ``fd``; ``links=False``: a symbolic link there (in a
    folder zarrmill keeps for itself, where it makes none) is refused and kept for its owner."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) and not links:
        raise UnsafeOutputError(f"{where or name}: a symbolic link zarrmill did not make, among its own files (target "
                                f"{os.readlink(name, dir_fd=fd)}); nothing was deleted. Remove it yourself (it may be "
                                "a colleague's), then rerun")
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=fd)  # a link goes, never what it points to
    elif tree:
        shutil.rmtree(name, dir_fd=fd)  # the descriptor-based walk: links inside are removed, not followed
    else:
        os.rmdir(name, dir_fd=fd)
    return True


def remove_empty(path: os.PathLike[str] | str, quiet: bool = False) -> bool:
    """``rmdir`` of a folder this run made: only if empty (anything anyone put there stops it, with
    a warning line unless ``quiet``). True when it went or was gone already."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        if not quiet:
            warn(path, "this run made a folder here, and now something else stands there: left as it is")
        return False
    try:
        names = os.listdir(path)
        if names == [FOLDER_MARKER]:  # its own marker only: the folder is still empty of anything else
            remove(Path(path), Path(path) / FOLDER_MARKER, tree=False)
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError as err:
        if err.errno == errno.ENOTDIR:  # replaced by a link or file since the lstat: not ours, left
            if not quiet:
                warn(path, "this run made a folder here, and now something else stands there: left as it is")
            return False
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        if not quiet:
            warn(path, "this run made this folder, but it now holds files that are not this run's: left as it is")
        return False


def walk(top: os.PathLike[str] | str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` that never follows a link, ``top`` included (a link at ``top`` yields nothing)."""
    for dirpath, dirs, files, _fd in os.fwalk(top, follow_symlinks=False):
        yield dirpath, dirs, files


def walk_regular(top: os.PathLike[str] | str) -> Iterator[tuple[str, str, list[str]]]:
    """(folder, relative folder, files) under ``top`` without following links; a link or a special
    file among the files is refused in one line naming it (a build zarrmill publishes holds only
    regular files it wrote)."""
    for dirpath, dirs, files, fd in os.fwalk(top, follow_symlinks=False):
        dirs.sort()
        for name in dirs + files:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise UnsafeOutputError(f"{os.path.join(dirpath, name)}: is not a regular file zarrmill wrote (a "
                                        f"{'symbolic link' if stat.S_ISLNK(st.st_mode) else 'special file'}); it is "
                                        "never published. Remove it yourself (it may be a colleague's), then rerun")
        rel = os.path.relpath(dirpath, top)
        yield dirpath, "" if rel == "." else rel.replace(os.sep, "/"), sorted(files)


def open_regular(path: os.PathLike[str] | str) -> int:
    """A descriptor for reading a file zarrmill wrote: never through a link, regular files only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeOutputError(f"{path}: became a symbolic link; it is never published. Remove it yourself "
                                    "(it may be a colleague's), then rerun") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else f"belongs to user id {st.st_uid}"
               if st.st_uid != os.geteuid() else "has other names (hard links) outside what zarrmill wrote")
        raise UnsafeOutputError(f"{path}: {why}, so it is not a file zarrmill wrote; it is never published. Remove "
                                "it yourself (it may be a colleague's), then rerun")
    return fd


def open_own_file(path: os.PathLike[str] | str, flags: int, private: bool = False) -> int:
    """Open (creating it if absent) a file zarrmill keeps for itself, never through a link;
    ``private`` (a log: tracebacks, paths, host names): readable by its owner only, an existing
    one narrowed to that too."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600 if private else 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _refuse(path, "files", "is a symbolic link") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise _refuse(path, "files", "is not a regular file" if not stat.S_ISREG(st.st_mode)
                      else f"belongs to user id {st.st_uid}, not to you")
    if private and st.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def replace_file(source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
    """Rename a file zarrmill just wrote onto ``target``: the caller judged the target (a file of
    an output it owns, an archive it packed) a moment before. A link at ``target`` is replaced
    itself, never what it points to."""
    os.replace(source, target)


def replace_entry(fd: int, source: str, target: str) -> None:
    """Rename, within one folder held by descriptor, a temp file just written onto ``target``."""
    os.replace(source, target, src_dir_fd=fd, dst_dir_fd=fd)


def discard_temp(path: os.PathLike[str] | str) -> None:
    """Remove a temp file this process made (``*.partial``) after a failed write; a folder or
    anything gone already is left alone."""
    if not str(path).endswith(".partial"):
        raise UnsafeOutputError(f"{path}: not a temp file of zarrmill's; never deleted as one")
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def remove_files_carrying(folder: os.PathLike[str] | str, names: Pattern[str], ours: Callable[[bytes], bool],
                          most: int = 4096) -> None:
    """Remove the regular files of ``folder`` whose names match ``names`` and whose content (its
    first ``most`` bytes) ``ours`` recognises: each is read and removed through one handle of the
    folder, never through a link, and only while its name still names the file that was read
    (judged at the moment of removing it); any other is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in [n for n in os.listdir(fd) if names.match(n)]:
            try:
                one = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue
            try:
                seen = os.fstat(one)
                data = os.read(one, most) if stat.S_ISREG(seen.st_mode) else b""
            finally:
                os.close(one)
            if not stat.S_ISREG(seen.st_mode) or not ours(data):
                continue
            # the same file as read: two looks through one handle on this node, a moment apart (what
            # makes it zarrmill's is its content, never these numbers); a link put in its place
            # since is removed itself, never what it points to
            now = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
