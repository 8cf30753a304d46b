"""Where a store lives, as the output guard (guard.py) needs to know it: a folder on disk or a
prefix in a bucket. Each place answers the same few questions (is the root writable at all, does
it overlap an input, what is under a node, is a path inside the root) and does the same few things
(make folders, delete a node); the guard's rules are written once, over either.

- Disk: paths are resolved (symlinks followed) before they are judged; /, the current folder and
  home are never written or deleted, whatever owns them.
- Bucket: keys are judged as text ('..' refused); emptiness and access are one LIST of the output
  prefix (MaxKeys=2, so the store's claim alone counts as empty); deletes are literal key lists."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from ...errors import InputNotFoundError, UnsafeOutputError, warn
from . import guard_empty, guard_fs
from .backend import DiskBackend, ObjectBackend
from .location import Location, Where, as_location, is_remote, key_of
from .object_store import delete_keys, has_objects, keys_under, probe_prefix
from .paths import (CLAIM_FILE, LOCK_FILES, MARKER_SUFFIX, bookkeeping_dir, forbidden_roots, inside, is_within, never_delete,
                    real)


def _listing(path: Path) -> list[str]:
    """What a folder holds, a store's claim file left out (zarrmill's own: a regular file, never a
    link someone put in its place)."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if CLAIM_FILE in names and guard_fs.is_regular(path / CLAIM_FILE):
        names.remove(CLAIM_FILE)
    return names


# the documents a plan writes into the nodes it creates (a failed plan's rollback removes these)
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


class DiskPlace:
    noun = "path"
    FOREIGN = ("exists, is not empty and was not created by zarrmill; zarrmill writes only into new or empty folders "
               "(or stores it created): choose a new output path")

    def __init__(self, root: Where, inputs: Iterable[Where]):
        self.root = Path(os.path.abspath(root))
        self.inputs = [Path(os.path.abspath(p)) for p in inputs if not is_remote(p)]  # a bucket cannot overlap
        self.bookkeeping = bookkeeping_dir(self.root)
        self.meta, self.store = DiskBackend(self.bookkeeping), DiskBackend(self.root, judged=self._judged)
        self.real_root: Path | None = None  # the root's real path and (device, inode), as judged
        self.identity: tuple[int, int] | None = None

    def check_root(self, in_place: bool) -> None:
        link = self._foreign_link()
        if link is not None:
            path, uid = link
            what = "is" if path == self.root else f"runs through {path}, which is"
            raise UnsafeOutputError(f"{self.root}: {what} a symbolic link (to {os.readlink(path)}) that belongs to user "
                                    f"id {uid}, not to you; zarrmill never writes through it. Remove it yourself (it "
                                    "may be a colleague's), or choose another output path")
        root = real(self.root)
        self.real_root, self.identity = root, guard_fs.identity_of(root)
        for bad in forbidden_roots():
            if is_within(bad, root):
                raise UnsafeOutputError(
                    f"{self.root}: refusing to write here: it is {'/' if bad == Path('/') else 'or contains ' + str(bad)} "
                    "(the current folder, home or /); give the output its own new folder, e.g. ./out.zarr")
        if in_place and not root.is_dir():
            raise InputNotFoundError(f"{self.root}: does not exist (or is not a folder); this step adds to an existing store")
        if root.exists() and not root.is_dir():
            raise UnsafeOutputError(f"{self.root}: exists and is a file, not a store; choose another output path")

    def _foreign_link(self) -> tuple[Path, int] | None:
        """(the link, its owner's user id) when the output path, or a folder on the way to it, is a
        symbolic link another user made (root's links, such as a cluster's /scratch, are the
        machine's own and followed)."""
        for path in (self.root, *self.root.parents):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) and st.st_uid not in (os.geteuid(), 0):
                return path, st.st_uid
        return None

    def _judged(self) -> tuple[Path, tuple[int, int] | None]:
        """The root as judged (its real path, and its identity once it exists)."""
        if self.real_root is None:
            self.real_root = real(self.root)
        if self.identity is None:
            self.identity = guard_fs.identity_of(self.real_root)
        return self.real_root, self.identity

    def overlaps(self) -> list[tuple[Location, bool, bool, bool]]:
        """(input, is the root, root inside it, it inside the root) for each input."""
        root = real(self.root)
        return [(inp, real(inp) == root, is_within(root, real(inp)), is_within(real(inp), root)) for inp in self.inputs]

    def has_content(self) -> bool:
        return bool(_listing(self.root))

    def entries(self, node: Where) -> list[Location]:
        return [Path(node) / name for name in _listing(Path(node))]

    def is_empty(self, node: Where) -> bool:
        node = Path(node)
        return not node.exists() or (node.is_dir() and not _listing(node))

    def exists(self, node: Where) -> bool:
        return Path(node).exists()

    def make_dirs(self, path: Where) -> list[Path]:
        """mkdir -p; returns the folders it created (a concurrent run's are not ours)."""
        missing, p = [], Path(path)
        while not os.path.lexists(p):
            missing.append(p)
            p = p.parent
        made = []
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue
            made.append(d)
        return made

    def contain(self, path: Where, what: str) -> Path:
        path = Path(os.path.abspath(path))
        rel = os.path.relpath(path, self.root)
        if rel == ".":
            return path
        if rel == ".." or rel.startswith(".." + os.sep):
            raise UnsafeOutputError(f"{path}: {what} lies outside the output {self.root}; names and "
                                    "metadata paths must stay inside it")
        return inside(self.root, *Path(rel).parts, what=what)

    def within(self, path: Where) -> Path | None:
        """``path`` if it resolves inside the root, else None."""
        path = Path(os.path.abspath(path))
        return path if is_within(real(path), real(self.root)) else None

    def rel(self, path: Where) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def never_delete(self, path: Where) -> None:
        never_delete(Path(path))

    def delete(self, path: Where) -> None:
        """A node of the output, by descriptor from the root as judged down, never through a link."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        root, identity = self._judged()
        if rel == ".":
            guard_fs.remove(root.parent, root, tree=True)
        else:
            guard_fs.remove(root, root / rel, tree=True, identity=identity)

    def discard(self, path: Where, kind: str) -> None:
        """Rollback of one thing this run made (guard.py: MADE_KINDS); folders are only emptied of
        what is this run's own here: their ``rmdir`` comes in :meth:`discard_folder`."""
        path = Path(path)
        never_delete(path)  # made by this run, so never one of these; checked all the same
        root, identity = self._judged()
        if kind == "file" and path.parent == self.bookkeeping:
            if guard_fs.check_own_folder(self.bookkeeping, "bookkeeping folder"):
                guard_fs.remove(self.bookkeeping, path, tree=False, links=False)
        elif kind == "file":
            guard_fs.remove(root, root / os.path.relpath(path, self.root), tree=False, identity=identity)
        elif kind == "node":  # what the plan wrote there goes; a colleague's file written into it meanwhile stays
            for name in guard_empty.empty_own(root, identity, below=os.path.relpath(path, self.root)):
                warn(self.root / name, "not this run's (another user's), so the rollback left it and its folders")
        elif kind == "store" and identity is not None:
            for name in guard_empty.empty_own(root, identity):
                warn(self.root / name, "not this run's (another user's), so the rollback left it and its folders")
        elif kind == "own" and guard_fs.check_own_folder(self.bookkeeping, "bookkeeping folder") \
                and guard_fs.lstat_dir(path):
            for name in set(os.listdir(path)) - {*LOCK_FILES, guard_fs.FOLDER_MARKER}:  # the lock goes when released
                guard_fs.remove(self.bookkeeping, path / name, tree=True, links=False)

    def discard_folder(self, path: Where, quiet: bool = False) -> None:
        """A folder this run made, once the run let go of its lock: ``rmdir``, only when empty."""
        never_delete(Path(path))
        guard_fs.remove_empty(path, quiet=quiet)

    def prepare(self) -> list[tuple[Path, str]]:
        """Before the lock: the root and its bookkeeping folder exist (the latter judged: a real
        folder of zarrmill's, never a link); returns what it made, with its kind."""
        guard_fs.check_own_folder(self.bookkeeping, "bookkeeping folder")
        made = [(p, "parent") for p in self.make_dirs(self.root.parent)]
        made += [(p, "store") for p in self.make_dirs(self.root)]
        if made and made[-1][1] == "store":  # judged now that it exists: this run made it
            self.real_root, self.identity = real(self.root), guard_fs.identity_of(real(self.root))
        if guard_fs.make_own_folder(self.bookkeeping, "bookkeeping folder"):
            made.append((self.bookkeeping, "own"))
        return made


class BucketPlace:
    noun = "prefix"
    FOREIGN = ("this prefix holds objects zarrmill did not create; zarrmill writes only into new or empty prefixes "
               "(or stores it created): choose a new output prefix")

    def __init__(self, root: Where, inputs: Iterable[Where]):
        self.root = as_location(str(root).rstrip("/"))
        self.inputs = [as_location(p) for p in inputs if is_remote(p)]
        self.bookkeeping = bookkeeping_of(self.root)
        self.meta, self.store = ObjectBackend(self.bookkeeping), ObjectBackend(self.root)
        self._first: list[str] | None = None  # the first keys under the prefix, listed once by check_root()
        self._conditional_checked = False

    def check_root(self, in_place: bool) -> None:
        self._first = probe_prefix(self.root, 2)  # access on the output prefix, and its emptiness, in one LIST
        if self.root.fs.isfile(key_of(self.root)):
            raise UnsafeOutputError(f"{self.root}: is an object, not a store prefix; choose another output")
        if in_place and not self.has_content():
            raise InputNotFoundError(f"{self.root}: holds no objects; this step adds to an existing store")

    def overlaps(self) -> list[tuple[Location, bool, bool, bool]]:
        root = str(self.root) + "/"
        return [(inp, src == root, root.startswith(src), src.startswith(root))
                for inp, src in ((i, str(i).rstrip("/") + "/") for i in self.inputs)]

    def has_content(self) -> bool:
        """Objects under the prefix other than its claim (one LIST of two keys; once per check)."""
        first = self._first if self._first is not None else probe_prefix(self.root, 2)
        self._first = None  # later calls list again: the store changes as the step writes
        return any(k != f"{key_of(self.root)}/{CLAIM_FILE}" for k in first)

    def entries(self, node: Where) -> list[Location]:
        """The children of a node (one listing), the store's claim left out."""
        base = key_of(node) + "/"
        names = sorted({k[len(base):].split("/", 1)[0] for k in keys_under(node) if k.startswith(base)} - {CLAIM_FILE})
        return [as_location(str(node).rstrip("/")) / name for name in names]

    def is_empty(self, node: Where) -> bool:
        """No object under the node but, at the root, the store's claim."""
        return not [k for k in keys_under(node) if k != f"{key_of(self.root)}/{CLAIM_FILE}"]

    def exists(self, node: Where) -> bool:
        return has_objects(node)

    def make_dirs(self, path: Where) -> list[Location]:
        """No folders in a bucket; a prefix that holds nothing yet is remembered for rollback."""
        return [] if has_objects(path) else [as_location(str(path).rstrip("/"))]

    def contain(self, path: Where, what: str) -> Location:
        path = as_location(str(path).rstrip("/"))
        text, root = str(path), str(self.root)
        rel = text[len(root):].lstrip("/") if text.startswith(root) else None
        if text != root and (rel is None or not text.startswith(root + "/") or ".." in rel.split("/")):
            raise UnsafeOutputError(f"{path}: {what} lies outside the output {self.root}; names and metadata paths "
                                    "must stay inside it")
        return path

    def within(self, path: Where) -> Location | None:
        try:
            return self.contain(path, "path")
        except UnsafeOutputError:
            return None

    def rel(self, path: Where) -> str:
        return str(path)[len(str(self.root)):].strip("/") or "."

    def never_delete(self, path: Where) -> None:
        """A bucket has no /, home or current folder."""

    def delete(self, path: Where) -> None:
        delete_keys(self.root, keys_under(path))

    def discard(self, path: Where, kind: str) -> None:
        """Rollback: the keys under what this run made (a bookkeeping prefix's lock goes when it is
        released); errors ignored (a server that is gone cannot be cleaned now; the rerun resumes)."""
        try:
            keys = keys_under(path)
            if kind == "own":
                keys = [k for k in keys if k.rsplit("/", 1)[-1] not in LOCK_FILES]
            elif kind == "node":  # a plan writes a node's metadata only; anyone else's object under it stays
                kept = [k for k in keys if k.rsplit("/", 1)[-1] not in METADATA_NAMES]
                for key in kept:
                    warn(f"{self.root.protocol}://{key}", "not written by this run's plan, so the rollback left it")
                keys = [k for k in keys if k not in kept]
            delete_keys(self.root, keys)
        except OSError:
            pass

    def discard_folder(self, path: Where, quiet: bool = False) -> None:
        """No folders in a bucket."""

    def prepare(self) -> list[tuple[Location, str]]:
        """Before a claim, once per guard: does the server refuse a second create-only put of one
        key? (No folders to make: the prefix is made by the objects put under it.)"""
        import uuid

        from ...errors import warn

        if self._conditional_checked:
            return []
        self._conditional_checked = True
        probe = f"probe-{uuid.uuid4().hex}"
        self.meta.create(probe, b"1")
        try:
            if self.meta.create(probe, b"2"):
                warn(self.root, "this S3 server ignores conditional writes (If-None-Match): two runs started at the "
                                "same instant on this output are not kept apart; run one at a time")
        finally:
            self.meta.delete([probe])
        return []


def bookkeeping_of(root: Where) -> Location:
    """Where zarrmill keeps a store's bookkeeping: ``.<name>.zarrmill`` beside it, in its folder or
    its bucket prefix."""
    if is_remote(root):
        root = as_location(str(root).rstrip("/"))
        return root.parent / f".{root.name}{MARKER_SUFFIX}"
    return bookkeeping_dir(root)


def place_of(root: Where, inputs: Iterable[Where] = ()) -> DiskPlace | BucketPlace:
    return BucketPlace(root, inputs) if is_remote(root) else DiskPlace(root, inputs)
