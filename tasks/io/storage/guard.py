"""The one output guard: what zarrmill may create, replace or delete.

Rules (README, "What zarrmill will and will not touch"):

- zarrmill deletes or replaces only what it created: a store that carries the id of the owner
  marker it wrote when it claimed the store (ownership.py: everything inside is then its own), a
  node it recorded before creating it inside a store it does not own (levels added to someone
  else's image), or an empty folder. ``--overwrite`` never widens this.
- That bookkeeping (owner marker, created records, locks, the ledger) lives beside the store, in
  the hidden folder ``.<name>.zarrmill`` (paths.bookkeeping_dir), never inside it, except the
  claim file a store carries until its first step finished.
- An output is refused when it is ``/``, the current folder, the home folder or an ancestor of
  either; when it equals, lies inside or contains an input; when it is a file; when it is a
  non-empty folder or store zarrmill did not create; when its path runs through a symlink loop.
- Every path built from names or metadata is joined through :func:`inside`, which resolves it and
  refuses anything that leaves its root (``..``, absolute parts, symlinks pointing out).
- What a failed plan created is removed again (:meth:`OutputGuard.rollback`), so storage is as it
  was before the run.

Reading through symlinks is fine (an input may be a link into an archive); writing never leaves
the output. The guard of a store in a bucket (object_guard.py) keeps the same rules with the same
ownership algorithm.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from ...errors import InputNotFoundError, OutputExistsError, UnsafeOutputError
from .backend import DiskBackend
from .ownership import (META_DIR, PROVENANCE_FILE, Ownership, provenance_owner,  # noqa: F401 - re-exported
                        provenance_side_file)
from .paths import (BOOKKEEPING_MARKERS, CLAIM_FILE, LOCK_FILES, MARKER_SUFFIX,  # noqa: F401 - re-exported
                    OWNER_FILE, bookkeeping_dir, forbidden_roots, inside, is_bookkeeping_name, is_within,
                    never_delete, real, remove_bookkeeping)


def _listing(path: Path) -> list[str]:
    """What a folder holds, the store's claim file left out (zarrmill's own)."""
    try:
        return [n for n in os.listdir(path) if n != CLAIM_FILE]
    except (FileNotFoundError, NotADirectoryError):
        return []


class OutputGuard:
    """Checks and claims one output root for one step; every delete under it goes through here.

    ``in_place``: the step adds to one of its inputs (pyramid levels, a well image): the root must
    exist, and only what this guard created (or an owned store) may be replaced."""

    def __init__(self, root: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (),
                 in_place: bool = False):
        self.root = Path(os.path.abspath(root))
        # inputs in a bucket cannot overlap a local output
        self.inputs = [Path(os.path.abspath(p)) for p in inputs if "://" not in str(p)]
        self.in_place = in_place
        self._made: list[Any] = []     # created by this run, newest last (rollback order)
        self.ownership = Ownership(self.root, DiskBackend(bookkeeping_dir(self.root)), DiskBackend(self.root))

    # -- checks (read only) --------------------------------------------------------------------
    def check(self) -> None:
        """Everything that makes this root unsafe to write, before anything is written."""
        root = real(self.root)
        for bad in forbidden_roots():
            if is_within(bad, root):
                raise UnsafeOutputError(
                    f"{self.root}: refusing to write here: it is {'/' if bad == Path('/') else 'or contains ' + str(bad)} "
                    "(the current folder, home or /); give the output its own new folder, e.g. ./out.zarr")
        if self.in_place and not root.is_dir():
            raise InputNotFoundError(f"{self.root}: does not exist (or is not a folder); this step adds to an existing store")
        if root.exists() and not root.is_dir():
            raise UnsafeOutputError(f"{self.root}: exists and is a file, not a store; choose another output path")
        for inp in self.inputs:
            src = real(inp)
            self._refuse_overlap(inp, src == root, is_within(root, src), is_within(src, root), "path")
        if not self.in_place and self.has_content() and not self.owned():
            raise UnsafeOutputError(
                f"{self.root}: exists, is not empty and was not created by zarrmill; zarrmill writes only "
                "into new or empty folders (or stores it created): choose a new output path")

    def _refuse_overlap(self, inp: Any, same: bool, out_in_input: bool, input_in_out: bool, what: str) -> None:
        """The output may not be, lie inside or contain an input (an in-place step adds to its input)."""
        if same and self.in_place:
            return
        if same:
            raise UnsafeOutputError(f"{self.root}: the output is the input {inp}; choose a new output {what}")
        if out_in_input:
            raise UnsafeOutputError(f"{self.root}: the output lies inside the input {inp}; choose a {what} outside it")
        if input_in_out:
            raise UnsafeOutputError(f"{self.root}: the output contains the input {inp}; choose a {what} beside it")

    @property
    def bookkeeping(self) -> Any:
        return bookkeeping_dir(self.root)

    def owned(self) -> bool:
        """The store carries the id of the owner marker beside it (ownership.py)."""
        return self.ownership.owned()

    def owner(self) -> dict:
        return self.ownership.marker()

    def owner_id(self) -> str | None:
        """The id provenance records, so that the store itself names its owner marker."""
        return self.ownership.owner_id() if self.owned() else None

    def seal(self) -> None:
        """A step finished and wrote the store's provenance (with :meth:`owner_id`): the store now
        names its owner itself, and its claim file goes."""
        if self.owned() and not self.in_place:
            self.ownership.seal()

    def has_content(self) -> bool:
        """Data in the root (the claim file is zarrmill's own, not data)."""
        return bool(_listing(self.root))

    # -- claiming and creating -----------------------------------------------------------------
    def claim(self, step: str) -> None:
        """Create the root (and missing parents, remembered for rollback) and, for a new or empty
        root, write the owner marker and the store's claim before anything else is created in it."""
        self.check()
        self._mkdirs(self.root)
        marker = self.bookkeeping
        self._mkdirs(marker)  # remembered: a failed plan on someone else's store removes it again
        if self.in_place or self.owned():
            return
        for name in os.listdir(marker):  # a ledger left by a store that stood here before is not this one's
            if name != OWNER_FILE and name not in LOCK_FILES and not name.endswith(".partial"):
                remove_bookkeeping(marker / name)
        existed = (self.root / CLAIM_FILE).exists()
        self.ownership.claim(step)
        if not existed:
            self._made.append(self.root / CLAIM_FILE)

    def make_dirs(self, path: Path) -> None:
        """mkdir -p, remembering what it created (for rollback)."""
        self._mkdirs(path)

    def _mkdirs(self, path: Path) -> None:
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # made by a concurrent run this instant: not ours to roll back
            self._made.append(d)

    @property
    def lock_path(self) -> Path:
        return self.bookkeeping / LOCK_FILES[0]

    def contain(self, path: str | os.PathLike[str], what: str = "path") -> Path:
        """``path`` (absolute, or relative to the current folder) if it lies inside the root once
        normalised and resolved; '..' out of the root or a link out of it is refused."""
        path = Path(os.path.abspath(path))
        rel = os.path.relpath(path, self.root)
        if rel == ".":
            return path
        if rel == ".." or rel.startswith(".." + os.sep):
            raise UnsafeOutputError(f"{path}: {what} lies outside the output {self.root}; names and "
                                    "metadata paths must stay inside it")
        return inside(self.root, *Path(rel).parts, what=what)

    def will_create(self, path: Path, absent: bool | None = None) -> Path:
        """Called before creating a node: checks containment and, in a store zarrmill does not own,
        records the node first (so a crash right after still leaves it ours)."""
        path = Path(os.path.abspath(path))
        if not is_within(real(path), real(self.root)):
            raise UnsafeOutputError(f"{path}: outside the output {self.root}; zarrmill never writes outside its output")
        if not path.exists():
            if not self.owned():
                self._mkdirs(self.bookkeeping)
                self.ownership.record_created(os.path.relpath(path, self.root).replace(os.sep, "/"))
            self._made.append(path)
        return path

    # -- replacing and deleting ----------------------------------------------------------------
    def may_replace(self, path: Path) -> bool:
        path = Path(os.path.abspath(path))
        if not is_within(real(path), real(self.root)) or path == self.root and self.in_place:
            return False
        if not path.exists() or (path.is_dir() and not _listing(path)):
            return True
        if self.owned():
            return True
        parts = Path(os.path.relpath(path, self.root)).parts
        return any("/".join(parts[:i]) in self.ownership.created() for i in range(1, len(parts) + 1))

    def remove(self, path: Path, why: str = "") -> None:
        """Delete ``path`` (a node of the output), only if zarrmill created it."""
        path = Path(os.path.abspath(path))
        self._refuse_unless_replaceable(path, why)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)

    def _refuse_unless_replaceable(self, path: Path, why: str = "") -> None:
        never_delete(path)
        if not self.may_replace(path):
            raise OutputExistsError(
                f"{path}: exists and was not created by zarrmill, so it is never replaced{why}; "
                "choose a new output path, or move it away yourself")

    def clear(self) -> None:
        """Empty an owned store (``--overwrite`` of the step that created it), keeping its marker."""
        never_delete(self.root)  # even with a marker beside it: a marker can be planted, / cannot move
        if not self.owned() or self.in_place:
            raise OutputExistsError(f"{self.root}: not a store zarrmill created; it is never emptied")
        for name in _listing(self.root):  # all of it may go, or nothing goes (a link planted inside)
            self._refuse_unless_replaceable(self.root / name)
        self.ownership.unseal()  # emptied, the store carries its claim until its step finishes again
        for name in _listing(self.root):
            self.remove(self.root / name)
        for name in os.listdir(self.bookkeeping):
            if name != OWNER_FILE and name not in LOCK_FILES:
                remove_bookkeeping(self.bookkeeping / name)

    def commit(self) -> None:
        """The plan succeeded: what it created is kept, whatever happens later in the run."""
        self._made.clear()

    def rollback(self) -> None:
        """Remove what this run created (a failed plan): newest first, only what is still ours."""
        for path in reversed(self._made):
            never_delete(path)  # made by this run, so never one of these; checked all the same
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except OSError:
                    pass
        self._made.clear()
        self.ownership.forget()
