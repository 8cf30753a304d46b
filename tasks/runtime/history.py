"""Run history of scheduled conversions: a small SQLite database in the state directory.

One row per attempt (running -> done / failed), one current ``waiting`` row per dataset that is
not complete yet, ``queued`` for failed datasets a user re-queued with ``zarrmill runs --retry``."""
from __future__ import annotations

import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL, path TEXT NOT NULL, status TEXT NOT NULL,
    started REAL, ended REAL, bytes_in INTEGER, bytes_out INTEGER, error TEXT,
    workflow_hash TEXT, input_hash TEXT, host TEXT
);
CREATE INDEX IF NOT EXISTS runs_dataset ON runs(dataset, id);
"""


@dataclass
class Run:
    id: int
    dataset: str
    path: str
    status: str
    started: float | None
    ended: float | None
    bytes_in: int | None
    bytes_out: int | None
    error: str | None
    workflow_hash: str | None
    input_hash: str | None
    host: str | None


class History:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "runs.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 60000")
        return db

    def latest(self, dataset: str) -> Run | None:
        with self._db() as db:
            row = db.execute("SELECT * FROM runs WHERE dataset = ? ORDER BY id DESC LIMIT 1", (dataset,)).fetchone()
        return Run(*row) if row else None

    def all(self, failed_only: bool = False) -> list[Run]:
        query = "SELECT * FROM runs" + (" WHERE status = 'failed'" if failed_only else "") + " ORDER BY id"
        with self._db() as db:
            return [Run(*r) for r in db.execute(query).fetchall()]

    def waiting(self, dataset: str, path: str, reason: str) -> None:
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            last = db.execute("SELECT id, status FROM runs WHERE dataset = ? ORDER BY id DESC LIMIT 1", (dataset,)).fetchone()
            if last and last[1] == "waiting":
                db.execute("UPDATE runs SET ended = ?, error = ? WHERE id = ?", (time.time(), reason, last[0]))
            else:
                db.execute("INSERT INTO runs (dataset, path, status, ended, error, host) VALUES (?, ?, 'waiting', ?, ?, ?)",
                           (dataset, path, time.time(), reason, socket.gethostname()))
            db.execute("COMMIT")

    def start(self, dataset: str, path: str, workflow_hash: str, input_hash: str, bytes_in: int) -> int:
        with self._db() as db:
            cur = db.execute(
                "INSERT INTO runs (dataset, path, status, started, bytes_in, workflow_hash, input_hash, host) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?, ?)",
                (dataset, path, time.time(), bytes_in, workflow_hash, input_hash, socket.gethostname()))
            return int(cur.lastrowid)

    def end(self, run_id: int, status: str, bytes_out: int = 0, error: str | None = None) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET status = ?, ended = ?, bytes_out = ?, error = ? WHERE id = ?",
                       (status, time.time(), bytes_out, error, run_id))

    def requeue_failed(self) -> list[str]:
        """Mark every dataset whose latest attempt failed as queued (converted by the next run)."""
        names = []
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            for (rid, name) in db.execute(
                    "SELECT r.id, r.dataset FROM runs r JOIN (SELECT dataset, MAX(id) AS m FROM runs GROUP BY dataset) l "
                    "ON r.id = l.m WHERE r.status = 'failed'").fetchall():
                db.execute("UPDATE runs SET status = 'queued' WHERE id = ?", (rid,))
                names.append(name)
            db.execute("COMMIT")
        return names
