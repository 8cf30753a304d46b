"""The one output guard: what zarrmill may create, replace or delete.

Rules (manual: Resume and safety, docs/how-to/resume-and-safety.md):

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
the output. The rules are written once here, for a folder and a bucket prefix alike: what differs
(resolving paths, listing, deleting) is the store's place (places.py), and ownership is one
algorithm over the storage backend (ownership.py).
"""
from __future__ import annotations

import os
from typing import Iterable

from ...errors import OutputExistsError, UnsafeOutputError
from .ownership import (META_DIR, PROVENANCE_FILE, Ownership, provenance_owner,  # noqa: F401 - re-exported
                        provenance_side_file)
from .paths import (BOOKKEEPING_MARKERS, CLAIM_FILE, LOCK_FILES, MARKER_SUFFIX,  # noqa: F401 - re-exported
                    OWNER_FILE, bookkeeping_dir, inside, is_bookkeeping_name, real, remove_bookkeeping)
from .location import Location, Where
from .places import place_of


class OutputGuard:
    """Checks and claims one output root for one step; every delete under it goes through here.

    ``in_place``: the step adds to one of its inputs (pyramid levels, a well image): the root must
    exist, and only what this guard created (or an owned store) may be replaced."""

    def __init__(self, root: Where, inputs: Iterable[Where] = (), in_place: bool = False):
        self.place = place_of(root, inputs)
        self.root = self.place.root
        self.in_place = in_place
        self._made: list[tuple[Location, str]] = []  # (what, MADE_KINDS) created by this run, newest last
        self._left: list[Location] = []  # folders a rollback emptied: rmdir'd once the lock is let go
        self._prepared = False
        self._quiet = False  # folders left by a withdrawn run are the other run's business: no warning
        self._fresh = False  # the root held no data when this run checked it (known_absent)
        # every node this run created and its ancestors, kept through commit (known_absent)
        self._made_or_above: set[str] = set()
        self.ownership = Ownership(self.root, self.place.meta, self.place.store)

    # -- checks (read only) --------------------------------------------------------------------
    def check(self) -> None:
        """Everything that makes this root unsafe to write, before anything is written."""
        self.place.check_root(self.in_place)
        for inp, same, out_in_input, input_in_out in self.place.overlaps():
            if same and self.in_place:
                continue
            what = self.place.noun
            if same:
                raise UnsafeOutputError(f"{self.root}: the output is the input {inp}; choose a new output {what}")
            if out_in_input:
                raise UnsafeOutputError(f"{self.root}: the output lies inside the input {inp}; choose a {what} outside it")
            if input_in_out:
                raise UnsafeOutputError(f"{self.root}: the output contains the input {inp}; choose a {what} beside it")
        content = not self.in_place and self.has_content()
        if content and not self.owned():
            raise UnsafeOutputError(f"{self.root}: {self.place.FOREIGN}")
        self._fresh = not self.in_place and not content

    @property
    def bookkeeping(self) -> Location:
        return self.place.bookkeeping

    @property
    def lock_path(self) -> Location:
        return self.bookkeeping / LOCK_FILES[0]

    def has_content(self) -> bool:
        """Data in the root (the claim file is zarrmill's own, not data)."""
        return self.place.has_content()

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
        if self.owned() and not self.in_place and self.ownership.claim_redundant():
            self.remove(self.root / CLAIM_FILE)

    # -- claiming and creating -----------------------------------------------------------------
    def prepare(self) -> None:
        """Create the root, its missing parents and its bookkeeping folder (where the lock lives),
        remembered for rollback; the bookkeeping folder is judged first (never a link)."""
        if not self._prepared:
            self._prepared = True
            for made, kind in self.place.prepare():
                self._remember([made], kind)

    def claim(self, step: str) -> None:
        """For a new or empty root, write the owner marker and the store's claim before anything
        else is created in it. Called holding the output's lock (engine.py), so two runs cannot
        both claim; checked again now that no other run can change it."""
        self.check()
        self.prepare()
        if self.in_place or self.owned():
            return
        self.place.drop_interrupted_claims(self.ownership.carries_marker_id)  # a claim killed on its way in
        meta = self.place.meta
        for key in meta.keys():  # a ledger left by a store that stood here before is not this one's
            if key.split("/", 1)[0] not in (OWNER_FILE, *LOCK_FILES) and not key.endswith(".partial"):
                meta.delete([key])
        new = [path for path, backend, key in ((self.bookkeeping / OWNER_FILE, meta, OWNER_FILE),
                                               (self.root / CLAIM_FILE, self.place.store, CLAIM_FILE))
               if backend.stat(key) is None]
        try:
            self.ownership.claim(step)
        finally:
            self._remember(new, "file")  # a failed plan leaves no marker and no claim it made

    def known_absent(self, path: Where) -> bool:
        """Nothing is at ``path`` and no request is needed to know it: the root held no data when
        this run checked it, the run holds the output's lock, and it has not created ``path`` or
        anything under it. (A bucket then asks nothing before creating a node.)"""
        return self._fresh and str(path).rstrip("/") not in self._made_or_above

    def skips_look(self, path: Where) -> bool:
        """No need to look whether ``path`` is there: looking costs a request (a bucket) and the
        run knows it is absent (known_absent). On disk a look costs nothing and is always made."""
        return not self.place.cheap_lookups and self.known_absent(path)

    def _remember(self, paths: Iterable[Where], kind: str) -> None:
        """Created by this run: for rollback (``_made``, with its kind) and for ``known_absent``
        (each node with its ancestors, up to the first one already known: a set lookup per node)."""
        for made in paths:
            self._made.append((made, kind))
            text = str(made).rstrip("/")
            while text and text not in self._made_or_above:
                self._made_or_above.add(text)
                text = text.rpartition("/")[0]

    def make_dirs(self, path: Where) -> None:
        """mkdir -p (nothing in a bucket), remembering what it created: a rollback empties a folder
        of the bookkeeping (ledger records are this run's), and ``rmdir``s any other when empty."""
        book = str(self.bookkeeping).rstrip("/")
        own = str(path) == book or str(path).startswith(book + "/")
        self._remember(self.place.make_dirs(path), "own" if own else "folder")

    def contain(self, path: Where, what: str = "path") -> Location:
        """``path`` if it lies inside the root once normalised (and, on disk, resolved); '..' out of
        the root or a link out of it is refused."""
        return self.place.contain(path, what)

    def will_create(self, path: Where, absent: bool | None = None) -> Location:
        """Called before creating a node: checks containment and, in a store zarrmill does not own,
        records the node first (so a crash right after still leaves it ours). ``absent``: the
        caller just found it absent (a bucket then asks nothing)."""
        inner = self.place.within(path)
        if inner is None:
            raise UnsafeOutputError(f"{path}: outside the output {self.root}; zarrmill never writes outside its output")
        if absent if absent is not None else not self.place.exists(inner):
            if not self.owned():
                self.make_dirs(self.bookkeeping)
                self.ownership.record_created(self.place.rel(inner))
            self._remember([inner], "node")
        return inner

    # -- replacing and deleting ----------------------------------------------------------------
    def may_replace(self, path: Where) -> bool:
        inner = self.place.within(path)
        if inner is None or (str(inner) == str(self.root) and self.in_place):
            return False
        if self.place.is_empty(inner) or self.owned():
            return True
        parts = self.place.rel(inner).split("/")
        return any("/".join(parts[:i]) in self.ownership.created() for i in range(1, len(parts) + 1))

    def remove(self, path: Where, why: str = "") -> None:
        """Delete ``path`` (a node of the output), only if zarrmill created it."""
        self._refuse_unless_replaceable(path, why)
        self.place.delete(self.place.within(path))

    def remove_files(self, paths: Iterable[Where]) -> None:
        """Delete files of the output (on disk), the rules checked once per folder: each folder must
        be one :meth:`remove` could delete, and each name a plain entry of it (a symlink goes, never
        what it points to). Packing an archive deletes hundreds of files a second this way."""
        by_folder: dict[str, list[str]] = {}
        for path in paths:
            folder, name = os.path.split(str(path))
            by_folder.setdefault(folder, []).append(name)
        for folder, names in by_folder.items():
            self._refuse_unless_replaceable(folder)
            for name in names:
                if name in ("", ".", "..") or "/" in name:
                    raise UnsafeOutputError(f"{folder}/{name}: not a plain file name; never deleted")
                self.place.delete(os.path.join(folder, name))

    def _refuse_unless_replaceable(self, path: Where, why: str = "") -> None:
        self.place.never_delete(path)
        if not self.may_replace(path):
            raise OutputExistsError(
                f"{path}: exists and was not created by zarrmill, so it is never replaced{why}; "
                f"choose a new output {self.place.noun}, or move it away yourself")

    def clear(self) -> None:
        """Empty an owned store (``--overwrite`` of the step that created it), keeping its marker."""
        self.place.never_delete(self.root)  # even with a marker beside it: a marker can be planted, / cannot move
        if not self.owned() or self.in_place:
            raise OutputExistsError(f"{self.root}: not a store zarrmill created; it is never emptied")
        entries = self.place.entries(self.root)
        for entry in entries:  # all of it may go, or nothing goes (a link planted inside)
            self._refuse_unless_replaceable(entry)
        self.ownership.unseal()  # emptied, the store carries its claim until its step finishes again
        for entry in entries:
            self.remove(entry)
        meta = self.place.meta
        meta.delete([k for k in meta.keys() if k.split("/", 1)[0] not in (OWNER_FILE, *LOCK_FILES)])

    def commit(self) -> None:
        """The plan succeeded: what it created is kept, whatever happens later in the run."""
        self._made.clear()

    def rollback(self) -> None:
        """Remove what this run created (a failed plan), newest first: files by name, nodes it
        recorded, the content of the store it claimed and of its bookkeeping (the lock aside);
        folders are only ``rmdir``'d, when empty (:meth:`remove_made_folders`), so what anyone
        else put in a folder this run made stays, with that folder."""
        for path, kind in reversed(self._made):
            if kind in ("file", "node", "store", "own"):
                self.place.discard(path, kind)
            if kind in ("folder", "parent", "store", "own"):
                self._left.append(path)
        self._made.clear()
        self.ownership.forget()

    def withdraw(self) -> None:
        """A run the output's lock refused: another run holds the output now, so nothing in it is
        touched, not even what this run made before asking (the root, its parents and bookkeeping
        folder, which the other run may already use). Those folders go only if still empty, quietly
        (:meth:`remove_made_folders`)."""
        self._left = [path for path, kind in reversed(self._made) if kind in ("folder", "parent", "store", "own")]
        self._made.clear()
        self._quiet = True
        self.ownership.forget()

    def remove_made_folders(self) -> None:
        """After a rollback, once the lock is let go: the folders this run made, deepest first,
        each only if empty (a warning names any left because it holds something else)."""
        left, self._left = self._left, []
        for path in left:
            self.place.discard_folder(path, quiet=self._quiet)


def open_guard(root: Where, inputs: Iterable[Where] = (), in_place: bool = False) -> OutputGuard:
    """The output guard of ``root``: on disk, or in a bucket."""
    return OutputGuard(root, inputs, in_place)
