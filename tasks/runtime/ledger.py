"""The ledger: which units of a step are done, stored with the output.

Layout: ``<parent>/.<store>.zarrmill/steps/<step>/step.json`` (beside the store, see the output
guard's ``bookkeeping_dir``) (task, parameters and their hash, unit count,
state) and ``done.log`` (one unit id per line, appended by the driver after a unit's writes
finished). A crash can lose the last few lines; those units are simply redone (units are idempotent).
A torn last line is ignored.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..io.storage.atomic import atomic_write_json, canonical_json, read_json
from ..errors import InputError
from ..io.storage.guard import bookkeeping_dir, remove_bookkeeping
from ..io.storage.location import Location, as_location, is_remote
from ..io.storage.object_store import bookkeeping_prefix, delete_keys, get, keys_under, put

FLUSH_EVERY_S = 1.0
OBJECT_FLUSH_EVERY_S = 2.0  # a PUT per flush in a bucket: fewer than on disk, where a flush is a buffered write


def params_hash(task: str, version: int, params: dict[str, Any]) -> str:
    payload = canonical_json({"task": task, "version": version, "params": params})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def safe_step_name(step: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", step)


@dataclass
class StepRecord:
    task: str
    params: dict[str, Any]
    params_hash: str
    state: str = "planned"  # planned -> running -> done
    n_units: int = 0
    updated: float = 0.0
    inputs: dict[str, list] = field(default_factory=dict)  # fingerprint of what the step read

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Ledger:
    def __init__(self, root: Path, step: str):
        self.root = Path(root)
        self.step = step
        self.dir = bookkeeping_dir(self.root) / "steps" / safe_step_name(step)
        self._log = None
        self._last_flush = 0.0

    # -- step record -------------------------------------------------------------------------
    def record(self) -> StepRecord | None:
        path = self.dir / "step.json"
        if not path.exists():
            return None
        doc = read_json(path)
        known = {k: v for k, v in doc.items() if k in StepRecord.__dataclass_fields__} if isinstance(doc, dict) else {}
        try:
            return StepRecord(**known)
        except TypeError:
            return None  # not a record this version can read: the step starts over

    def write_record(self, rec: StepRecord) -> None:
        rec.updated = round(time.time(), 3)
        atomic_write_json(self.dir / "step.json", rec.to_json())

    def reset(self) -> None:
        if self.dir.exists():
            remove_bookkeeping(self.dir)

    def clear_done(self) -> None:
        """Forget which units are done (the step is redone over existing output)."""
        remove_bookkeeping(self.dir / "done.log")

    # -- done units --------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        path = self.dir / "done.log"
        if not path.exists():
            return set()
        with open(path, "rb") as fh:
            data = fh.read()
        lines = data.split(b"\n")
        if not data.endswith(b"\n"):
            lines = lines[:-1]  # torn last line from a crash
        return {line.decode() for line in lines if line}

    def mark_done(self, unit_ids: Iterable[str]) -> None:
        if self._log is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._log = open(self.dir / "done.log", "ab")
        self._log.write("".join(f"{uid}\n" for uid in unit_ids).encode())
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_EVERY_S:
            self.flush()
            self._last_flush = now

    def flush(self) -> None:
        # to the OS only: a killed process loses nothing; an fsync here also forced the units'
        # freshly written chunks to disk (ext4 commits them with the journal), 0.1-0.5 s a time
        if self._log is not None:
            self._log.flush()

    def close(self) -> None:
        if self._log is not None:
            self.flush()
            os.fsync(self._log.fileno())  # once per step: the record survives a node crash
            self._log.close()
            self._log = None


class ObjectLedger:
    """The ledger of a store in a bucket (io/storage/object_store.py): step.json is one object, done
    units are flushed as new create-only objects ``done/<seq>-<token>`` (no appends); a kill loses
    at most the units since the last flush, which are redone."""

    def __init__(self, root: Location, step: str):
        self.root = as_location(str(root))
        self.step = step
        self.dir = bookkeeping_prefix(self.root) / "steps" / safe_step_name(step)
        self._pending: list[str] = []
        self._token = uuid.uuid4().hex[:12]
        self._seq = 0
        self._last_flush = 0.0

    def record(self):
        data = get(self.dir / "step.json")
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            raise InputError(f"{self.dir / 'step.json'}: not valid JSON; the ledger object is damaged") from None
        known = {k: v for k, v in doc.items() if k in StepRecord.__dataclass_fields__} if isinstance(doc, dict) else {}
        try:
            return StepRecord(**known)
        except TypeError:
            return None

    def write_record(self, rec) -> None:
        rec.updated = round(time.time(), 3)
        put(self.dir / "step.json", (json.dumps(rec.to_json(), indent=2, sort_keys=True, default=str) + "\n").encode())

    def reset(self) -> None:
        delete_keys(self.root, keys_under(self.dir))

    def clear_done(self) -> None:
        delete_keys(self.root, keys_under(self.dir / "done"))

    def done_ids(self) -> set[str]:
        out: set[str] = set()
        for key in keys_under(self.dir / "done"):
            data = get(as_location("s3://" + key)) or b""
            out.update(line for line in data.decode().split("\n") if line)
        return out

    def mark_done(self, unit_ids: Iterable[str]) -> None:
        self._pending.extend(unit_ids)
        now = time.monotonic()
        if now - self._last_flush >= OBJECT_FLUSH_EVERY_S:
            self.flush()
            self._last_flush = now

    def flush(self) -> None:
        if not self._pending:
            return
        self._seq += 1
        put(self.dir / "done" / f"{self._seq:08d}-{self._token}", "".join(f"{u}\n" for u in self._pending).encode(),
            create_only=True)
        self._pending.clear()

    def close(self) -> None:
        self.flush()




def open_ledger(root, step: str) -> "Ledger | ObjectLedger":
    """The ledger of ``step`` in ``root``, on disk or in a bucket."""
    return ObjectLedger(root, step) if is_remote(root) else Ledger(root, step)


def diff_params(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    changed = [
        f"{k}: {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}"
        for k in keys
        if old.get(k) != new.get(k)
    ]
    return "; ".join(changed) or "task version changed"


def list_steps(root: Path) -> list[tuple[str, StepRecord, int]]:
    """(step, record, units done) for every step recorded under ``root``."""
    if str(root).startswith(("http://", "https://")):
        return []  # a read-only web store keeps no ledger
    if is_remote(root):
        base = bookkeeping_prefix(root) / "steps"
        names = sorted({k[len(str(base)) - len("s3://"):].strip("/").split("/", 1)[0] for k in keys_under(base)})
    else:
        base = bookkeeping_dir(root) / "steps"
        names = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    out = []
    for name in names:
        led = open_ledger(root, name)
        rec = led.record()
        if rec is not None:
            out.append((name, rec, len(led.done_ids())))
    return out
