"""A store's place on disk, as the output guard (guard.py) judges it: paths are resolved (symlinks
followed) before they are judged; /, the current folder and home are never written or deleted,
whatever owns them; deletes go by descriptor from the root as judged, never through a link
(guard_fs.py). The protocol it keeps is places.Place."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterable


from ...errors import InputNotFoundError, UnsafeOutputError, warn
from . import guard_empty, guard_fs
from .backend import DiskBackend
from .location import Location, Where, on_disk, zarr_url
from .paths import CLAIM_FILE, CLAIM_PARTIAL, LOCK_FILES, bookkeeping_dir, forbidden_roots, inside, is_within, never_delete, real
from .handles import writable_url


def _listing(path: Path) -> list[str]:
    """What a folder holds, a store's claim file left out (zarrmill's own: a regular file, never a
    link someone put in its place), and so is a claim a kill interrupted on its way in."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [name for name in names
            if not ((name == CLAIM_FILE or CLAIM_PARTIAL.match(name)) and guard_fs.is_regular(path / name))]


class DiskPlace:
    noun = "path"
    cheap_lookups = True
    FOREIGN = ("exists, is not empty and was not created by zarrmill; zarrmill writes only into new or empty folders "
               "(or stores it created): choose a new output path")

    def __init__(self, root: Where, inputs: Iterable[Where]):
        self.root = Path(os.path.abspath(root))
        # an input on this machine, by path or by a local kind's URL; a bucket cannot overlap
        self.inputs = [Path(os.path.abspath(local)) for local in map(on_disk, inputs) if local is not None]
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

    def drop_interrupted_claims(self, ours: Callable[[bytes], bool]) -> None:
        """Remove the temp files of a claim a kill interrupted (``CLAIM_PARTIAL``) whose content
        ``ours`` recognises (the id of the owner marker beside the store: ownership.py). Each is
        read and removed through one folder handle, never through a link, and only while its name
        still names the file that was read; any other is left as it is."""
        guard_fs.remove_files_carrying(self.root, CLAIM_PARTIAL, ours)

    def entries(self, node: Where) -> list[Location]:
        return [Path(node) / name for name in _listing(Path(node))]

    def is_empty(self, node: Where) -> bool:
        node = Path(node)
        return not node.exists() or (node.is_dir() and not _listing(node))

    def exists(self, node: Where) -> bool:
        return Path(node).exists()

    def node_there(self, node: Where) -> bool:
        """A file, folder or link (a dangling one too: someone's) at ``node``."""
        path = Path(node)
        return path.exists() or path.is_symlink()

    def make_group(self, path: Location, zarr_format: int) -> None:
        """Without zarr's event loop (skeleton.py); where another node is, zarr opens it and says what."""
        from .skeleton import write_group_if_absent  # here: zarr's import (0.7 s) only where stores are made

        if not write_group_if_absent(Path(path), zarr_format):
            import zarr

            zarr.open_group(writable_url(path), mode="a", zarr_format=zarr_format)

    def make_array(self, path: Location, kwargs: dict[str, object]) -> None:
        from .skeleton import write_array

        write_array(Path(path), kwargs)  # the documents zarr makes, made once per layout (skeleton.py)

    def is_array_as_made(self, path: Location, kwargs: dict[str, object]) -> bool:
        from .skeleton import is_array_as_made

        return is_array_as_made(Path(path), kwargs)  # compared without zarr (skeleton.py)

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
