"""The guard's hands for one rollback: a store (or a node of it) a failed plan created, emptied
of what the running user owns, by file descriptor from the root as judged (guard_fs.py), never
through a link; folders go with ``rmdir`` only, so whatever anyone else put there stays."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .guard_fs import _is_link, open_below, open_judged


def empty_own(base: os.PathLike[str] | str, identity: tuple[int, int] | None, below: str = ".") -> list[str]:
    """Rollback of a store (or, ``below``, a node of it) this run created: every file and link
    under it that the running user owns goes, deepest first, judged by lstat as it goes, and every
    folder left empty (``rmdir`` only; the node itself too); what belongs to anyone else stays
    (with the folders holding it). Returns what was left, relative to ``base``."""
    parts = [p for p in Path(below).parts if p != "."]
    root = open_judged(base, identity)
    try:
        parent = open_below(root, parts[:-1])
    except (FileNotFoundError, NotADirectoryError):
        return []
    finally:
        os.close(root)
    left: list[str] = []
    try:
        node = parts[-1] if parts else "."
        st = _stat_at(parent, node)
        if st is None or not stat.S_ISDIR(st.st_mode):  # gone, or a node that is one file or link
            return left if _unlink_own(parent, node) else [below]
        fd = open_below(parent, parts[-1:])
        try:
            for dirpath, dirs, files, dfd in os.fwalk(".", topdown=False, follow_symlinks=False, dir_fd=fd):
                left += [os.path.normpath(os.path.join(below, dirpath, name))
                         for name in files + [d for d in dirs if _is_link(dfd, d)] if not _unlink_own(dfd, name)]
                for name in dirs:
                    _rmdir_if_empty(dfd, name)
        finally:
            os.close(fd)
        if parts:
            _rmdir_if_empty(parent, node)
    finally:
        os.close(parent)
    return left


def _rmdir_if_empty(fd: int, name: str) -> None:
    try:  # anything anyone put there (or a link, kept) keeps it
        os.rmdir(name, dir_fd=fd)
    except OSError:
        pass


def _stat_at(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _unlink_own(fd: int, name: str) -> bool:
    """Unlink ``name`` (never what a link points to) if the running user owns it; True when it is
    gone (or was never there)."""
    st = _stat_at(fd, name)
    if st is not None and st.st_uid != os.geteuid():
        return False
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    return True
