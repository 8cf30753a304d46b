"""The ledger: which units of a step are done, kept beside the output, one algorithm over the
storage backend (io/storage/backend.py) for a folder and a bucket prefix alike.

Layout: ``<parent>/.<store>.zarrmill/steps/<step>/`` (beside the store, see paths.bookkeeping_dir):
``step.json`` (task, parameters and their hash, unit count, state, input fingerprint), replaced
whole, and ``done/<seq>-<token>``, one record per flush, created exclusively with the ids of the
units whose writes finished (no appends: object stores have none, and a record is whole or absent).
A kill loses at most the units since the last flush; those are simply redone (units are
idempotent). A torn last line (a record on a file system without atomic creation) is ignored.
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

from ...errors import InputError
from ...io.storage.atomic import canonical_json
from ...io.storage.backend import backend_for
from ...io.storage.location import traits_of, written_there
from ...io.storage.places import bookkeeping_of

FLUSH_EVERY_S = 1.0
OBJECT_FLUSH_EVERY_S = 2.0  # a PUT per flush in a bucket: fewer than on disk


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
    state: str = "planned"  # then the moves of step_states.py: planning -> running -> done (or following)
    n_units: int = 0
    updated: float = 0.0
    inputs: dict[str, list] = field(default_factory=dict)  # fingerprint of what the step read

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Ledger:
    def __init__(self, root: Any, step: str):
        self.root = root
        self.step = step
        self.dir = bookkeeping_of(root) / "steps" / safe_step_name(step)
        self.backend = backend_for(self.dir)
        self._pending: list[str] = []
        self._token = uuid.uuid4().hex[:12]
        self._seq = 0
        self._last_flush = 0.0
        self._every = OBJECT_FLUSH_EVERY_S if traits_of(root).writes_are_requests else FLUSH_EVERY_S

    def error_log(self) -> Path:
        """Where failed units' tracebacks go: beside the ledger, or (where files cannot be appended
        to: a bucket) a local file under the user's state folder, named after the store and step;
        its path is in the failure line."""
        if traits_of(self.root).local:
            return self.dir / "errors.log"
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "zarrmill" / "logs"
        digest = hashlib.sha256(f"{self.root}\0{self.step}".encode()).hexdigest()[:12]
        return base / f"{Path(str(self.root)).name}-{self.step}-{digest}.log"

    # -- step record -------------------------------------------------------------------------
    def record(self) -> StepRecord | None:
        data = self.backend.read("step.json")
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise InputError(f"{self.dir / 'step.json'}: not valid JSON; the ledger record is damaged (remove the "
                             f"folder {self.dir} to start the step over)") from None
        known = {k: v for k, v in doc.items() if k in StepRecord.__dataclass_fields__} if isinstance(doc, dict) else {}
        try:
            return StepRecord(**known)
        except TypeError:
            return None  # not a record this version can read: the step starts over

    def write_record(self, rec: StepRecord) -> None:
        rec.updated = round(time.time(), 3)
        self.backend.replace("step.json", canonical_json(rec.to_json()).encode())

    def reset(self) -> None:
        self.backend.delete(self.backend.keys())

    def clear_done(self) -> None:
        """Forget which units are done (the step is redone over existing output)."""
        self.backend.delete(self.backend.keys("done"))

    # -- done units --------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        out: set[str] = set()
        for key in self.backend.keys("done"):
            data = self.backend.read(key) or b""
            lines = data.split(b"\n")
            if not data.endswith(b"\n"):
                lines = lines[:-1]  # torn last line
            out.update(line.decode() for line in lines if line)
        return out

    def mark_done(self, unit_ids: Iterable[str]) -> None:
        self._pending.extend(unit_ids)
        now = time.monotonic()
        if now - self._last_flush >= self._every:
            self.flush()
            self._last_flush = now

    def flush(self, durable: bool = False) -> None:
        if not self._pending:
            return
        self._seq += 1
        self.backend.create(f"done/{self._seq:08d}-{self._token}", "".join(f"{u}\n" for u in self._pending).encode(),
                            durable=durable)
        self._pending.clear()

    def close(self) -> None:
        self.flush(durable=True)  # once per step: the last records survive a node crash


def open_ledger(root: Any, step: str) -> Ledger:
    """The ledger of ``step`` in ``root``, on disk or in a bucket."""
    return Ledger(root, step)


def diff_params(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    changed = [
        f"{k}: {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}"
        for k in keys
        if old.get(k) != new.get(k)
    ]
    return "; ".join(changed) or "task version changed"


def list_steps(root: Any) -> list[tuple[str, StepRecord, int]]:
    """(step, record, units done) for every step recorded under ``root``."""
    if not written_there(root):
        return []  # zarrmill only reads there: it keeps no ledger
    names = sorted({key.split("/", 1)[0] for key in backend_for(bookkeeping_of(root) / "steps").keys() if "/" in key})
    out = []
    for name in names:
        led = open_ledger(root, name)
        rec = led.record()
        if rec is not None:
            out.append((name, rec, len(led.done_ids())))
    return out
