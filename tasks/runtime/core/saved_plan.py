"""What a task's plan read, saved beside the step's ledger, so a resumed step goes straight to its
units: a full plate's metadata takes most of a minute to read and check. It is keyed by the task,
its version, every parameter (paths included: a folder reached through another mount is another
plan) and the inputs' fingerprint, and only offered to a resume of the same step with unchanged
inputs; a key that differs is refused (``load`` gives None) and the task plans anew."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ...io.storage.atomic import atomic_write_bytes

FILE = "plan.bin"


def plan_key(task: str, version: int, params: dict[str, Any], inputs: dict[str, list]) -> str:
    text = json.dumps([task, version, params, inputs], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SavedPlan:
    path: Any  # the file, in the step's ledger folder (on disk or in the bucket)
    key: str
    usable: bool  # a resume of the same step, inputs unchanged

    def load(self) -> bytes | None:
        if not self.usable:
            return None
        try:
            return self.path.read_bytes()
        except (FileNotFoundError, OSError):
            return None

    def save(self, data: bytes) -> None:
        atomic_write_bytes(self.path, data, durable=False)  # lost in a crash: the resume plans anew
