"""The output guard, ledger and lock for stores in an S3 bucket: the promises of guard.py, ledger.py
and locks.py kept with what object stores have (whole objects, create-only and conditional puts,
listings), without appends, renames, mtimes or folders.

- Bookkeeping lives beside the store as on disk: ``s3://bucket/<parent>/.<name>.zarrmill/``
  (owner marker, created-node records, ledger, lock); a reader listing the store sees only zarr
  objects.
- The owner marker is written create-only (``If-None-Match: *``) before anything else. A prefix
  that holds objects and no marker of zarrmill's is someone else's: refused, never written to or
  deleted from. Once a step finished, the store's provenance must carry the marker's id (a prefix
  emptied and refilled by someone else is no longer zarrmill's).
- Deleting is by listed key, under a node zarrmill created, never a prefix-wide delete.
- Nodes created in a store zarrmill does not own are each recorded as their own create-only object
  (``created/<hash>``), where disk appends a line to ``created.log``.
- The ledger (runtime/ledger.py ObjectLedger) and the run lock (runtime/locks.py ObjectLock) use
  the object primitives here: whole PUTs, create-only PUTs, listings, deletes by key.
- A server that ignores conditional writes is detected once per run (a warning line): then two
  runs started at the same instant on one output are not kept apart.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from typing import Any, Iterable

from ...errors import InputNotFoundError, OutputExistsError, UnsafeOutputError, warn
from .guard import LOCK_FILES, MARKER_SUFFIX, OWNER_FILE, OutputGuard, provenance_owner
from .location import Location, as_location, is_remote

CREATED_DIR = "created"


def key_of(path: Location) -> str:
    """What the location's fsspec file system calls it: ``bucket/key`` for s3fs, the whole URL for
    http(s)."""
    text = str(path)
    return text.rstrip("/") if text.startswith(("http://", "https://")) else text.split("://", 1)[1].rstrip("/")


def put(path: Location, data: bytes, create_only: bool = False, **conditions: str) -> None:
    """One PUT of a whole object; ``create_only`` fails with FileExistsError if it exists."""
    path.fs.pipe_file(key_of(path), data, mode="create" if create_only else "overwrite", **conditions)


def put_file(path: Location, local: os.PathLike[str]) -> None:
    """A local file as one object (s3fs sends a large one in parts, each retried on its own)."""
    path.fs.put_file(os.fspath(local), key_of(path))


def get_file(path: Location, local: os.PathLike[str]) -> None:
    """An object into a local file (in parts when large)."""
    path.fs.get_file(key_of(path), os.fspath(local))


def put_many(objects: dict[Any, bytes]) -> None:
    """Whole objects, many PUTs in flight at once (s3fs's batch), e.g. a table's dozens of small files."""
    if objects:
        fs = next(iter(objects)).fs
        fs.pipe({key_of(path): data for path, data in objects.items()})


def get(path: Location) -> bytes | None:
    try:
        return path.fs.cat_file(key_of(path))
    except FileNotFoundError:
        return None


def keys_under(path: Location) -> list[str]:
    """Every object key at or under ``path`` (``bucket/key`` form), listed fresh."""
    fs = path.fs
    fs.invalidate_cache()
    base = key_of(path)
    found = []
    try:
        if fs.isfile(base):
            found.append(base)
    except FileNotFoundError:
        pass
    try:
        found += [k for k in fs.find(base + "/")]
    except FileNotFoundError:
        pass
    return sorted(set(found))


def has_objects(path: Location) -> bool:
    """Objects under ``path/`` (a node: a group, an array, a table): one LIST request for one key."""
    bucket, _, key = key_of(path).partition("/")
    found = path.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key + "/" if key else "", MaxKeys=1)
    return bool(found.get("Contents"))


def delete_keys(path: Location, keys: Iterable[str]) -> None:
    keys = list(keys)
    if keys:
        path.fs.rm(keys)
        path.fs.invalidate_cache()


def bookkeeping_prefix(root: Location) -> Location:
    return as_location(str(root).rstrip("/")).parent / f".{as_location(str(root)).name}{MARKER_SUFFIX}"


def describe_access_error(root: Location, err: BaseException) -> str:
    """One line for an S3 error before any work: which bucket, what went wrong, what to do."""
    text = f"{type(err).__name__}: {err}"
    bucket = key_of(root).split("/", 1)[0]
    lowered = text.lower()
    if "nosuchbucket" in lowered or "specified bucket does not exist" in lowered:
        return f"{root}: bucket {bucket!r} does not exist (create it, or check the bucket name and endpoint)"
    if isinstance(err, PermissionError) or any(s in lowered for s in (
            "invalidaccesskeyid", "signaturedoesnotmatch", "signature we calculated", "not exist in our records",
            "accessdenied", "access denied", "forbidden", "nocredentials", "unable to locate credentials", "403")):
        return (f"{root}: the S3 server refused the credentials for bucket {bucket!r} (set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE for this endpoint)")
    if any(s in lowered for s in ("connect", "endpoint", "timeout", "name or service", "unreachable")):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS's default"
        return f"{root}: cannot reach the S3 endpoint {endpoint} ({type(err).__name__}); check AWS_ENDPOINT_URL_S3"
    return f"{root}: S3 error ({type(err).__name__}: {str(err)[:200]})"


def check_access(root: Location) -> None:
    """The bucket exists and these credentials may list it: one line otherwise, before any work."""
    from ...errors import ConfigError

    bucket = key_of(root).split("/", 1)[0]
    try:
        root.fs.ls(bucket + "/", refresh=True)
    except FileNotFoundError as err:
        raise ConfigError(describe_access_error(root, err if "bucket" in str(err).lower() else
                                                Exception("NoSuchBucket"))) from None
    except Exception as err:  # noqa: BLE001 - every client error becomes the one line above
        raise ConfigError(describe_access_error(root, err)) from None


class ObjectGuard(OutputGuard):
    """guard.OutputGuard for a store in a bucket (module doc)."""

    def __init__(self, root: Location, inputs: Iterable[Any] = (), in_place: bool = False):
        self.root = as_location(str(root).rstrip("/"))
        self.inputs = [as_location(p) for p in inputs]
        self.in_place = in_place
        self._made: list[Location] = []
        self._created_log: set[str] | None = None
        self._conditional_checked = False
        self._owner_doc: dict | None = None  # the marker as last read or written by this guard
        self._owned: bool | None = None  # owned(), asked once per marker change (a GET of the store's root)

    # -- checks --------------------------------------------------------------------------------
    def check(self) -> None:
        check_access(self.root)
        root = str(self.root) + "/"
        for inp in self.inputs:
            if not is_remote(inp):
                continue
            src = str(inp).rstrip("/") + "/"
            if self.in_place and src == root:
                continue
            if src == root:
                raise UnsafeOutputError(f"{self.root}: the output is the input {inp}; choose a new output prefix")
            if root.startswith(src):
                raise UnsafeOutputError(f"{self.root}: the output lies inside the input {inp}; choose a prefix outside it")
            if src.startswith(root):
                raise UnsafeOutputError(f"{self.root}: the output contains the input {inp}; choose a prefix beside it")
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

    def owned(self) -> bool:
        if self._owned is None:
            doc = self.owner()
            self._owned = doc.get("tool") == "zarrmill" and doc.get("store") == str(self.root) and (
                not doc.get("sealed") or provenance_owner(self.root) == doc.get("id"))
        return self._owned

    def owner(self) -> dict:
        """The marker, read once per guard (only this guard writes it while the run holds the lock)."""
        if self._owner_doc is None:
            data = get(self.bookkeeping / OWNER_FILE)
            try:
                doc = json.loads(data) if data is not None else {}
            except ValueError:
                doc = {}
            self._owner_doc = doc if isinstance(doc, dict) else {}
        return dict(self._owner_doc)

    def _write_owner(self, doc: dict, create_only: bool = False) -> None:
        self._owner_doc, self._owned = None, None
        put(self.bookkeeping / OWNER_FILE, json_bytes(doc), create_only=create_only)
        self._owner_doc = dict(doc)

    def seal(self) -> None:
        doc = self.owner()
        if self.owned() and not doc.get("sealed") and provenance_owner(self.root) == doc.get("id"):
            self._write_owner({**doc, "sealed": True})

    def _unseal(self) -> None:
        doc = self.owner()
        if doc.get("sealed"):
            self._write_owner({**doc, "sealed": False})

    def has_content(self) -> bool:
        fs = self.root.fs
        fs.invalidate_cache()
        try:
            return bool(fs.find(key_of(self.root) + "/", maxdepth=None, withdirs=False)[:1])
        except FileNotFoundError:
            return False

    # -- claiming and creating -----------------------------------------------------------------
    def claim(self, step: str) -> None:
        self.check()
        self._check_conditional_writes()
        if self.in_place or self.owned():
            return
        for key in keys_under(self.bookkeeping):  # a ledger left by a store that stood here before
            name = key.rsplit("/", 1)[-1]
            if name != OWNER_FILE and name not in LOCK_FILES:
                delete_keys(self.root, [key])
        doc = {"tool": "zarrmill", "id": uuid.uuid4().hex, "step": step, "store": str(self.root),
               "created": round(time.time(), 3), "host": socket.gethostname()}
        try:
            self._write_owner(doc, create_only=True)
        except FileExistsError:
            self._owner_doc, self._owned = None, None
            if self.owned():
                return  # a concurrent run of this very output made it this instant
            # a marker left by a store that is gone (the prefix is empty: check() said so)
            self._write_owner(doc)

    def _check_conditional_writes(self) -> None:
        """Once per guard: does the server refuse a second create-only put of one key?"""
        if self._conditional_checked:
            return
        self._conditional_checked = True
        probe = self.bookkeeping / f"probe-{uuid.uuid4().hex}"
        put(probe, b"1", create_only=True)
        try:
            put(probe, b"2", create_only=True)
            warn(self.root, "this S3 server ignores conditional writes (If-None-Match): two runs started at the "
                            "same instant on this output are not kept apart; run one at a time")
        except FileExistsError:
            pass
        finally:
            delete_keys(self.root, [key_of(probe)])

    def make_dirs(self, path: Location) -> None:
        """Object stores have no folders."""

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
                self._log_created(path)
            self._made.append(path)
        return path

    def _rel(self, path: Location) -> str:
        return str(path)[len(str(self.root)):].strip("/") or "."

    def _log_created(self, path: Location) -> None:
        rel = self._rel(path)
        record = self.bookkeeping / CREATED_DIR / hashlib.sha256(rel.encode()).hexdigest()[:32]
        try:
            put(record, rel.encode(), create_only=True)
        except FileExistsError:
            pass
        self._created().add(rel)

    def _created(self) -> set[str]:
        if self._created_log is None:
            names = set()
            for key in keys_under(self.bookkeeping / CREATED_DIR):
                data = get(as_location("s3://" + key))
                if data:
                    names.add(data.decode())
            self._created_log = names
        return self._created_log

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
        return any("/".join(parts[:i]) in self._created() for i in range(1, len(parts) + 1))

    def remove(self, path: Any, why: str = "") -> None:
        path = as_location(str(path).rstrip("/"))
        if not self.may_replace(path):
            raise OutputExistsError(f"{path}: exists and was not created by zarrmill, so it is never replaced{why}; "
                                    "choose a new output prefix, or move it away yourself")
        delete_keys(self.root, keys_under(path))

    def clear(self) -> None:
        if not self.owned() or self.in_place:
            raise OutputExistsError(f"{self.root}: not a store zarrmill created; it is never emptied")
        self._unseal()
        delete_keys(self.root, keys_under(self.root))
        for key in keys_under(self.bookkeeping):
            if key.rsplit("/", 1)[-1] not in (OWNER_FILE, *LOCK_FILES):
                delete_keys(self.root, [key])

    def rollback(self) -> None:
        for path in reversed(self._made):
            try:
                delete_keys(self.root, keys_under(path))
            except OSError:
                pass
        self._made.clear()

    def remove_bookkeeping(self, path: Location) -> None:
        """Objects of zarrmill's own bookkeeping prefix only."""
        if not str(path).startswith(str(self.bookkeeping) + "/") and str(path) != str(self.bookkeeping):
            raise UnsafeOutputError(f"{path}: not in zarrmill's bookkeeping prefix; it is never deleted")
        delete_keys(self.root, keys_under(path))


def json_bytes(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()


def open_guard(root: Any, inputs: Iterable[Any] = (), in_place: bool = False) -> OutputGuard:
    """The output guard of ``root``: on disk, or in a bucket."""
    return ObjectGuard(root, inputs, in_place) if is_remote(root) else OutputGuard(root, inputs, in_place)
