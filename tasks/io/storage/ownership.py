"""Whether a store is zarrmill's: one rule for a folder and a bucket prefix, over the storage
backend (backend.py), never device or inode numbers, host names or the path a store was reached
through (a cluster sees one folder from many nodes, under other device numbers and mounts).

- Claiming a new or empty store writes its owner marker beside it (``.<name>.zarrmill/owner.json``,
  a fresh random id) and then the same id into the store itself (``.zarrmill-claim``).
- Once a step finished, the store's provenance names that id (root attributes of a zarr store, or
  the side file of a folder output) and the claim file is removed (:meth:`Ownership.seal`): a
  finished store holds only what its readers expect.
- A store is zarrmill's while it carries its marker's id, in its claim file or in its provenance.
  A marker alone proves nothing: a folder or prefix someone made after the store was deleted, a
  copy of another store, or objects a colleague put under a prefix a failed run left behind do not
  carry the id.
- Nodes zarrmill creates inside a store it does not own (levels added to someone else's image) are
  recorded first, one create-only record each (``created/<hash>``), so a crash right after still
  leaves them zarrmill's."""
from __future__ import annotations

import hashlib
import json
import socket
import time
import uuid
from pathlib import Path

from .backend import Backend
from .location import JsonValue, Where, as_location
from .paths import CLAIM_FILE, CREATED_LOG, OWNER_FILE

CREATED_DIR = "created"


class Ownership:
    """The owner marker (in ``meta``, the bookkeeping folder or prefix) and the claim (in
    ``store``, the store's own root) of one store."""

    def __init__(self, root: Where, meta: Backend, store: Backend):
        self.root, self.meta, self.store = root, meta, store
        self._doc: dict | None = None
        self._owned: bool | None = None
        self._created: set[str] | None = None

    def marker(self) -> dict:
        """The owner marker, read once (only the run holding the lock writes it)."""
        if self._doc is None:
            self._doc = _json_dict(self.meta.read(OWNER_FILE))
        return dict(self._doc)

    def owner_id(self) -> str | None:
        doc = self.marker()
        ident = doc.get("id")
        return ident if doc.get("tool") == "zarrmill" and isinstance(ident, str) and ident else None

    def owned(self) -> bool:
        """The store carries its marker's id (claim file, else provenance)."""
        if self._owned is None:
            ident = self.owner_id()
            self._owned = ident is not None and (
                _json_dict(self.store.read(CLAIM_FILE)).get("id") == ident or provenance_owner(self.root) == ident)
        return self._owned

    def carries_marker_id(self, data: bytes) -> bool:
        """``data`` is a claim naming this store's owner marker (a claim's temp file a kill left)."""
        ident = self.owner_id()
        return ident is not None and _json_dict(data).get("id") == ident

    def forget(self) -> None:
        self._doc = self._owned = None

    def claim(self, step: str) -> list[str]:
        """Make a new or empty store zarrmill's: the marker first, then the claim inside the store
        (a kill in between leaves an empty store and a marker that proves nothing). Returns the
        keys written into the store (for a rollback)."""
        doc = {"tool": "zarrmill", "id": uuid.uuid4().hex, "step": step, "created": round(time.time(), 3),
               "host": socket.gethostname(), "store": str(self.root)}  # host and store: for people, never judged
        data = _json_bytes(doc)
        if not self.meta.create(OWNER_FILE, data):
            self.meta.replace(OWNER_FILE, data)  # a marker that proved nothing (the store was new or empty)
        self._doc, self._owned = doc, None
        self.store.replace(CLAIM_FILE, _json_bytes({"id": doc["id"]}))
        self._owned = True
        return [CLAIM_FILE]

    def claim_redundant(self) -> bool:
        """The store's provenance names the marker's id and the claim file is still there: the
        guard may remove the claim (seal)."""
        ident = self.owner_id()
        return ident is not None and provenance_owner(self.root) == ident and self.store.read(CLAIM_FILE) is not None

    def unseal(self) -> None:
        """Before an owned store is emptied (its provenance goes with it), the claim comes back."""
        ident = self.owner_id()
        if ident is not None and self.owned() and _json_dict(self.store.read(CLAIM_FILE)).get("id") != ident:
            self.store.replace(CLAIM_FILE, _json_bytes({"id": ident}))

    # -- nodes created in a store zarrmill does not own ---------------------------------------
    def record_created(self, rel: str) -> None:
        record = f"{CREATED_DIR}/{hashlib.sha256(rel.encode()).hexdigest()[:32]}"
        self.meta.create(record, rel.encode())  # exists already: recorded by an earlier run
        self.created().add(rel)

    def created(self) -> set[str]:
        if self._created is None:
            names = {self.meta.read(k) for k in self.meta.keys(CREATED_DIR)}
            legacy = (self.meta.read(CREATED_LOG) or b"").decode("utf-8", "replace").splitlines()  # before 2026-12
            self._created = {n.decode("utf-8", "replace") for n in names if n} | {line for line in legacy if line}
        return self._created


def _json_dict(data: bytes | None) -> dict:
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _json_bytes(doc: JsonValue) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()


PROVENANCE_FILE = "zarrmill-provenance.json"
META_DIR = "zarrmill"  # a folder output's own files (summary, provenance) when its top level must hold cases only


def provenance_side_file(root: Path) -> Path:
    """Where a folder output (not a zarr store) keeps its provenance: ``zarrmill/provenance.json``
    when the output has that folder (compress's .b2nd sets: nnU-Net reads every top-level file as a
    case), else ``zarrmill-provenance.json`` at its top."""
    root = as_location(root)
    return root / META_DIR / "provenance.json" if (root / META_DIR).is_dir() else root / PROVENANCE_FILE


def provenance_owner(root: Path) -> str | None:
    """The owner id a store's provenance records (root attributes of a zarr store, else the side
    file zarrmill writes into a folder output), or None."""
    for name, inner in (("zarr.json", "attributes"), (".zattrs", None), ("", "")):
        path = as_location(root) / name if name else provenance_side_file(root)
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if inner == "":
            prov = doc
        else:
            attrs = (doc.get(inner, {}) if inner else doc) if isinstance(doc, dict) else {}
            ours = attrs.get("zarrmill") if isinstance(attrs, dict) else None
            prov = ours.get("provenance", {}) if isinstance(ours, dict) else {}
        owner = prov.get("owner") if isinstance(prov, dict) else None
        if owner is not None or name != "zarr.json":
            return owner if isinstance(owner, str) else None
    return None
