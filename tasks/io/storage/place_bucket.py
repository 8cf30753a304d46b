"""A store's place in a bucket, as the output guard (guard.py) judges it: keys are judged as text
('..' refused); emptiness and access are one LIST of the output prefix (MaxKeys=2, so the store's
claim alone counts as empty); deletes are literal key lists. The protocol it keeps is
places.Place."""
from __future__ import annotations

from typing import Callable, Iterable


from ...errors import InputNotFoundError, UnsafeOutputError, warn
from .backend import ObjectBackend
from .location import Location, Where, as_location, is_remote, key_of, zarr_url
from .object_store import delete_keys, has_objects, keys_under, probe_prefix
from .paths import CLAIM_FILE, LOCK_FILES, MARKER_SUFFIX

# the documents a plan writes into the nodes it creates (a failed plan's rollback removes these)
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


class BucketPlace:
    noun = "prefix"
    cheap_lookups = False  # a LIST is a request: what this run made is known without one (guard.known_absent)
    FOREIGN = ("this prefix holds objects zarrmill did not create; zarrmill writes only into new or empty prefixes "
               "(or stores it created): choose a new output prefix")

    def __init__(self, root: Where, inputs: Iterable[Where]):
        self.root = as_location(str(root).rstrip("/"))
        self.inputs = [as_location(p) for p in inputs if is_remote(p)]
        self.bookkeeping = bucket_bookkeeping(self.root)
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

    def drop_interrupted_claims(self, ours: Callable[[bytes], bool]) -> None:
        """Nothing to do: a claim is one PUT, which leaves no temp object behind."""

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

    def node_there(self, node: Where) -> bool:
        """Objects under ``node`` (one listing request, where exists() asks twice)."""
        return has_objects(node)

    def make_group(self, path: Location, zarr_format: int) -> None:
        import zarr  # here: the guard's module is imported by commands that never open a store

        zarr.open_group(zarr_url(path), mode="a", zarr_format=zarr_format)

    def make_array(self, path: Location, kwargs: dict[str, object]) -> None:
        import zarr

        zarr.create_array(zarr_url(path), **kwargs)  # zarr-python's own requests (counted and tuned)

    def is_array_as_made(self, path: Location, kwargs: dict[str, object]) -> bool:
        return False  # not compared here: zarr opens it and compares (arrays.ensure_array)

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


def bucket_bookkeeping(root: Where) -> Location:
    """``.<name>.zarrmill`` beside the store's prefix, in its bucket."""
    root = as_location(str(root).rstrip("/"))
    return root.parent / f".{root.name}{MARKER_SUFFIX}"
