"""``for_each`` workflows: convert every dataset found (glob or list) that is ready and new,
failed-and-requeued, or changed, each as an independent run with its own outputs and ledger,
several at once on one executor. Overlapping runs coordinate through per-dataset locks; every
attempt is recorded in the run history (history.py: one JSON file per attempt) in the state directory."""
from __future__ import annotations

import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import StepFailedError, ZarrmillError
from ...io.storage.guard import is_bookkeeping_name
from ..core.datasets import Dataset, discover, fingerprint, readiness
from .executors import Executor
from ..core.history import History
from ..core.locks import DatasetLock, Locked
from .runner import check_worker_jobs, run_dir_for, run_steps, steps_hash
from .workflow import Workflow


@dataclass
class Outcome:
    converted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)
    skipped_failed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{len(v)} {k.replace('_', ' ')}" for k, v in self.__dict__.items() if v]
        return ", ".join(parts) or "no datasets found"


def state_dir(wf: Workflow) -> Path:
    if wf.for_each.state_dir:
        return Path(wf.for_each.state_dir)
    first = wf.steps[0].params.output_path() or Path.cwd() / "x"
    return first.parent / ".zarrmill-state"


def run_for_each(wf: Workflow, overwrite: bool = False, dry_run: bool = False) -> Outcome:
    fe = wf.for_each
    history = History(state_dir(wf))
    outcome = Outcome()
    todo: list[tuple[Dataset, str, int, str]] = []
    for ds in discover(fe.glob, fe.list):
        ready, why = readiness(ds, fe.ready.marker, fe.ready.quiet_seconds)
        if not ready:
            history.waiting(ds.name, str(ds.path), why)
            outcome.waiting.append(ds.name)
            print(f"[{ds.name}] waiting: {why}", flush=True)
            continue
        fp, nbytes = fingerprint(ds)
        try:
            wf_hash = steps_hash(wf.for_dataset(ds))  # a changed step parameter reconverts
        except ZarrmillError as err:
            _record_failure(history, ds, fp, nbytes, "invalid", err, outcome)
            continue
        verdict = _verdict(history, ds, fp, wf_hash)
        if verdict == "up to date":
            outcome.up_to_date.append(ds.name)
        elif verdict == "failed":
            outcome.skipped_failed.append(ds.name)
            print(f"[{ds.name}] failed before with the same input; fix it and rerun, or "
                  f"zarrmill runs --retry {wf.source}", flush=True)
        else:
            todo.append((ds, fp, nbytes, wf_hash))
    if dry_run:
        for ds, *_ in todo:
            print(f"[{ds.name}] would convert {ds.path}")
        return outcome
    if todo:
        check_worker_jobs(wf.for_dataset(todo[0][0]))  # a setting the cluster rejects: before any dataset
        with Executor(wf.executor, wf.name, run_dir_for(wf)) as executor, \
                ThreadPoolExecutor(fe.max_concurrent) as pool:
            jobs = [pool.submit(_convert, wf, executor, history, ds, fp, nbytes, wf_hash, overwrite, outcome)
                    for ds, fp, nbytes, wf_hash in todo]
            try:
                for job in jobs:
                    job.result()
            except BaseException:  # Ctrl-C, SIGTERM: the worker jobs go first, so the datasets'
                executor.close()  # threads stop at once instead of the pool waiting for them to finish
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    print(f"{wf.name}: {outcome.summary()}", flush=True)
    if outcome.failed:
        raise StepFailedError(f"{len(outcome.failed)} datasets failed: {', '.join(outcome.failed)}; "
                              f"see zarrmill runs --failed {wf.source}")
    return outcome


def _record_failure(history: History, ds: Dataset, fp: str, nbytes: int, wf_hash: str, err: Exception,
                    outcome: Outcome) -> None:
    run = history.start(ds.name, str(ds.path), wf_hash, fp, nbytes)
    history.end(run, "failed", error=str(err).splitlines()[0][:2000])
    outcome.failed.append(ds.name)
    print(f"[{ds.name}] failed: {err}", file=sys.stderr, flush=True)


def _verdict(history: History, ds: Dataset, fp: str, wf_hash: str) -> str:
    last = history.latest(ds.name)
    if last is None or last.status in ("waiting", "queued", "running"):
        return "convert"
    same = last.input_hash == fp and last.workflow_hash == wf_hash
    if last.status == "done" and same:
        return "up to date"
    if last.status == "failed" and same:
        return "failed"
    return "convert"


def _convert(wf: Workflow, executor: Executor, history: History, ds: Dataset, fp: str, nbytes: int,
             wf_hash: str, overwrite: bool, outcome: Outcome) -> None:
    lock = DatasetLock(state_dir(wf) / "locks" / f"{ds.name}.lock", stale_after=wf.for_each.lock_stale_seconds)
    try:
        lock.acquire()
    except Locked as err:
        outcome.locked.append(ds.name)
        print(f"[{ds.name}] skipped: {err} (another run converts it)", flush=True)
        return
    try:
        if _verdict(history, ds, fp, wf_hash) == "up to date":  # converted while we waited
            outcome.up_to_date.append(ds.name)
            return
        run = history.start(ds.name, str(ds.path), wf_hash, fp, nbytes)
        try:
            wf_ds = wf.for_dataset(ds)
            run_steps(wf_ds, executor, overwrite, label=f"[{ds.name}] ")
            out_bytes = sum(_size(s.params.ledger_root()) for s in wf_ds.steps)
            history.end(run, "done", out_bytes)
            outcome.converted.append(ds.name)
        except ZarrmillError as err:
            history.end(run, "failed", error=str(err).splitlines()[0][:2000])
            outcome.failed.append(ds.name)
            print(f"[{ds.name}] failed: {err}", file=sys.stderr, flush=True)
        except Exception as err:  # noqa: BLE001 - one dataset's bug must not stop the others
            history.end(run, "failed", error=f"{type(err).__name__}: {err}"[:2000])
            outcome.failed.append(ds.name)
            traceback.print_exc()
    finally:
        lock.release()


def _size(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not any(is_bookkeeping_name(p) for p in f.parts)) if path.exists() else 0
