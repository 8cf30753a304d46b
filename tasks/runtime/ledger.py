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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..io.storage.atomic import atomic_write_json, canonical_json, read_json
from ..io.storage.guard import bookkeeping_dir, remove_bookkeeping

FLUSH_EVERY_S = 1.0


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
    base = bookkeeping_dir(root) / "steps"
    out = []
    if base.is_dir():
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            led = Ledger(root, d.name)
            rec = led.record()
            if rec is not None:
                out.append((d.name, rec, len(led.done_ids())))
    return out
