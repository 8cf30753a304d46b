"""Run history of scheduled conversions, safe on the NFS home and scratch folders of a cluster.

One small JSON file per attempt, ``<state>/history/<dataset>/<id>.json``, created and updated only
by writing a temp file and renaming it over the record (rename within a folder is atomic on local
file systems and on NFS; SQLite's locking is not reliable on NFS, and appends to one shared file
from several hosts interleave). Ids sort by time, so a dataset's latest attempt is its largest id.
Statuses: ``running`` -> ``done`` / ``failed``; one current ``waiting`` record per dataset that is
not complete yet; ``queued`` for failed datasets a user re-queued with ``zarrmill runs --retry``."""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from ...io.storage.atomic import atomic_write_json
from ...io.storage.guard_fs import check_own_folder, make_own_folder
from ...io.storage.secrets import redact_tree

STATE_MARKER = ".zarrmill-state"  # one of the output guard's BOOKKEEPING_MARKERS


@dataclass
class Run:
    id: str
    dataset: str
    path: str
    status: str
    started: float | None = None
    ended: float | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    error: str | None = None
    workflow_hash: str | None = None
    input_hash: str | None = None
    host: str | None = None


class History:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir) / "history"
        # the state folder is judged first: a real folder of the running user's, never a link a
        # neighbour planted (it holds the locks and the record of what was converted)
        if not check_own_folder(state_dir, "state folder", marked=False):
            Path(state_dir).parent.mkdir(parents=True, exist_ok=True)
            make_own_folder(state_dir, "state folder")
        self.dir.mkdir(exist_ok=True)
        (Path(state_dir) / STATE_MARKER).touch()  # the state folder (locks, history) is zarrmill's

    # -- reading -----------------------------------------------------------------------------
    def _folder(self, dataset: str) -> Path:
        return self.dir / quote(dataset, safe="")

    def _records(self, folder: Path) -> list[Run]:
        runs = []
        for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
            if not name.endswith(".json"):
                continue  # temp files of a write in progress
            try:
                runs.append(Run(**json.loads((folder / name).read_text())))
            except (OSError, ValueError, TypeError):
                continue  # a record from a crashed writer is never half-written; others are skipped
        return runs

    def latest(self, dataset: str) -> Run | None:
        runs = self._records(self._folder(dataset))
        return runs[-1] if runs else None

    def all(self, failed_only: bool = False) -> list[Run]:
        runs = [r for folder in sorted(self.dir.iterdir()) if folder.is_dir() for r in self._records(folder)]
        runs.sort(key=lambda r: r.id)
        return [r for r in runs if r.status == "failed"] if failed_only else runs

    # -- writing -----------------------------------------------------------------------------
    def _save(self, run: Run) -> None:
        # a dataset's error line is stored: redacted, as it was shown
        atomic_write_json(self._folder(run.dataset) / f"{run.id}.json", redact_tree(asdict(run)))

    def _new(self, dataset: str, path: str, status: str, **fields) -> Run:
        run_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        run = Run(run_id, dataset, path, status, host=socket.gethostname(), **fields)
        self._save(run)
        return run

    def waiting(self, dataset: str, path: str, reason: str) -> None:
        last = self.latest(dataset)
        if last is not None and last.status == "waiting":
            last.ended, last.error = time.time(), reason
            self._save(last)
        else:
            self._new(dataset, path, "waiting", ended=time.time(), error=reason)

    def start(self, dataset: str, path: str, workflow_hash: str, input_hash: str, bytes_in: int) -> Run:
        return self._new(dataset, path, "running", started=time.time(), bytes_in=bytes_in,
                         workflow_hash=workflow_hash, input_hash=input_hash)

    def end(self, run: Run, status: str, bytes_out: int = 0, error: str | None = None) -> None:
        run.status, run.ended, run.bytes_out, run.error = status, time.time(), bytes_out, error
        self._save(run)

    def requeue_failed(self) -> list[str]:
        """Mark every dataset whose latest attempt failed as queued (converted by the next run)."""
        names = []
        for folder in sorted(self.dir.iterdir()):
            runs = self._records(folder) if folder.is_dir() else []
            if runs and runs[-1].status == "failed":
                runs[-1].status = "queued"
                self._save(runs[-1])
                names.append(runs[-1].dataset)
        return names
