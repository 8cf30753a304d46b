"""The output guard of a store in an S3 bucket: guard.py's promises with what object stores have
(whole objects, create-only and conditional puts, listings, literal deletes), and the same
ownership algorithm (ownership.py) over the object backend.

- Bookkeeping lives beside the store as on disk: ``s3://bucket/<parent>/.<name>.zarrmill/``.
- A prefix that holds objects and does not carry its marker's id is someone else's: refused,
  never written to or deleted from; a marker a failed run left behind proves nothing.
- A failed plan leaves the bucket as it was: the marker, the claim, the step record and every node
  the plan created are deleted again, by their literal keys.
- Deleting is by listed key, under a node zarrmill created, never a pattern or a prefix-wide delete.
- A server that ignores conditional writes is detected once per run (a warning line): then two
  runs started at the same instant on one output are not kept apart."""
from __future__ import annotations

import uuid
from typing import Any, Iterable

from ...errors import InputNotFoundError, OutputExistsError, UnsafeOutputError, warn
from .backend import ObjectBackend
from .guard import OutputGuard
from .location import Location, as_location, is_remote, key_of
from .object_store import delete_keys, has_objects, keys_under, probe_prefix
from .ownership import Ownership
from .paths import CLAIM_FILE, LOCK_FILES, MARKER_SUFFIX, OWNER_FILE


def bookkeeping_prefix(root: Location) -> Location:
    return as_location(str(root).rstrip("/")).parent / f".{as_location(str(root)).name}{MARKER_SUFFIX}"


class ObjectGuard(OutputGuard):
    """guard.OutputGuard for a store in a bucket (module doc)."""

    def __init__(self, root: Location, inputs: Iterable[Any] = (), in_place: bool = False):
        self.root = as_location(str(root).rstrip("/"))
        self.inputs = [as_location(p) for p in inputs]
        self.in_place = in_place
        self._made: list[Location] = []  # node prefixes created by this run
        self._made_keys: list[str] = []  # single objects created by this run (marker, claim)
        self._conditional_checked = False
        self._first: list[str] | None = None  # the first keys under the prefix, listed once by check()
        self.meta = ObjectBackend(bookkeeping_prefix(self.root))
        self.ownership = Ownership(self.root, self.meta, ObjectBackend(self.root))

    # -- checks --------------------------------------------------------------------------------
    def check(self) -> None:
        self._first = probe_prefix(self.root, 2)  # access on the output prefix, and its emptiness, in one LIST
        root = str(self.root) + "/"
        for inp in self.inputs:
            if not is_remote(inp):
                continue
            src = str(inp).rstrip("/") + "/"
            self._refuse_overlap(inp, src == root, root.startswith(src), src.startswith(root), "prefix")
        if self.root.fs.isfile(key_of(self.root)):
            raise UnsafeOutputError(f"{self.root}: is an object, not a store prefix; choose another output")
        if self.in_place and not self.has_content():
            raise InputNotFoundError(f"{self.root}: holds no objects; this step adds to an existing store")
        if not self.in_place and self.has_content() and not self.owned():
            raise UnsafeOutputError(
                f"{self.root}: this prefix holds objects zarrmill did not create; zarrmill writes only into new or "
                "empty prefixes (or stores it created): choose a new output prefix")

    @property
    def bookkeeping(self) -> Location:
        return bookkeeping_prefix(self.root)

    def has_content(self) -> bool:
        """Objects under the prefix other than its claim (one LIST of two keys, once per check)."""
        first = self._first if self._first is not None else probe_prefix(self.root, 2)
        self._first = None  # later calls list again: the store changes as the step writes
        return any(k != f"{key_of(self.root)}/{CLAIM_FILE}" for k in first)

    # -- claiming and creating -----------------------------------------------------------------
    def claim(self, step: str) -> None:
        self.check()
        self._check_conditional_writes()
        if self.in_place or self.owned():
            return
        marker_was = self.meta.stat(OWNER_FILE) is not None
        for key in self.meta.keys():  # a ledger left by a store that stood here before
            if key != OWNER_FILE and key not in LOCK_FILES:
                self.meta.delete([key])
        claim_was = self.ownership.store.stat(CLAIM_FILE) is not None
        try:
            self.ownership.claim(step)
        finally:
            if not marker_was:
                self._made_keys.append(key_of(self.meta.path(OWNER_FILE)))
            if not claim_was:
                self._made_keys.append(key_of(self.root / CLAIM_FILE))

    def _check_conditional_writes(self) -> None:
        """Once per guard: does the server refuse a second create-only put of one key?"""
        if self._conditional_checked:
            return
        self._conditional_checked = True
        probe = f"probe-{uuid.uuid4().hex}"
        self.meta.create(probe, b"1")
        try:
            if self.meta.create(probe, b"2"):
                warn(self.root, "this S3 server ignores conditional writes (If-None-Match): two runs started at the "
                                "same instant on this output are not kept apart; run one at a time")
        finally:
            self.meta.delete([probe])

    def make_dirs(self, path: Location) -> None:
        """No folders in a bucket; a prefix that holds nothing yet is remembered for rollback."""
        if not has_objects(path):
            self._made.append(as_location(str(path).rstrip("/")))

    def _mkdirs(self, path: Location) -> None:
        """Object stores have no folders."""

    @property
    def lock_path(self) -> Location:
        return self.bookkeeping / LOCK_FILES[0]

    def contain(self, path: Any, what: str = "path") -> Location:
        path = as_location(str(path).rstrip("/"))
        text, root = str(path), str(self.root)
        rel = text[len(root):].lstrip("/") if text.startswith(root) else None
        if text != root and (rel is None or not text.startswith(root + "/") or ".." in rel.split("/")):
            raise UnsafeOutputError(f"{path}: {what} lies outside the output {self.root}; names and metadata paths "
                                    "must stay inside it")
        return path

    def will_create(self, path: Any, absent: bool | None = None) -> Location:
        """As on disk: a node that is not there yet is remembered for rollback (and, in a store
        zarrmill does not own, recorded first); one listing request, none when the caller just
        found it ``absent``."""
        path = self.contain(path)
        if absent if absent is not None else not has_objects(path):
            if not self.owned():
                self.ownership.record_created(self._rel(path))
            self._made.append(path)
        return path

    def _rel(self, path: Location) -> str:
        return str(path)[len(str(self.root)):].strip("/") or "."

    # -- replacing and deleting ----------------------------------------------------------------
    def may_replace(self, path: Any) -> bool:
        try:
            path = self.contain(path)
        except UnsafeOutputError:
            return False
        if str(path) == str(self.root) and self.in_place:
            return False
        if not keys_under(path) or self.owned():
            return True
        parts = self._rel(path).split("/")
        return any("/".join(parts[:i]) in self.ownership.created() for i in range(1, len(parts) + 1))

    def remove(self, path: Any, why: str = "") -> None:
        path = as_location(str(path).rstrip("/"))
        if not self.may_replace(path):
            raise OutputExistsError(f"{path}: exists and was not created by zarrmill, so it is never replaced{why}; "
                                    "choose a new output prefix, or move it away yourself")
        delete_keys(self.root, keys_under(path))

    def clear(self) -> None:
        if not self.owned() or self.in_place:
            raise OutputExistsError(f"{self.root}: not a store zarrmill created; it is never emptied")
        self.ownership.unseal()
        claim = f"{key_of(self.root)}/{CLAIM_FILE}"
        delete_keys(self.root, [k for k in keys_under(self.root) if k != claim])
        self.meta.delete([k for k in self.meta.keys() if k not in (OWNER_FILE, *LOCK_FILES)])

    def rollback(self) -> None:
        for path in reversed(self._made):
            try:
                delete_keys(self.root, keys_under(path))
            except OSError:
                pass
        try:
            delete_keys(self.root, list(reversed(self._made_keys)))
        except OSError:
            pass
        self._made.clear()
        self._made_keys.clear()
        self.ownership.forget()

    def commit(self) -> None:
        self._made.clear()
        self._made_keys.clear()

    def remove_bookkeeping(self, path: Location) -> None:
        """Objects of zarrmill's own bookkeeping prefix only."""
        if not str(path).startswith(str(self.bookkeeping) + "/") and str(path) != str(self.bookkeeping):
            raise UnsafeOutputError(f"{path}: not in zarrmill's bookkeeping prefix; it is never deleted")
        delete_keys(self.root, keys_under(path))


def open_guard(root: Any, inputs: Iterable[Any] = (), in_place: bool = False) -> OutputGuard:
    """The output guard of ``root``: on disk, or in a bucket."""
    return ObjectGuard(root, inputs, in_place) if is_remote(root) else OutputGuard(root, inputs, in_place)
