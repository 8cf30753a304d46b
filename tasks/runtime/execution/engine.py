"""The engine: run one step of any task on any dask ``Client`` (or inline, for ``sync``).

It refuses an unsafe output, takes the output's lock, runs the step under it (step_run.py: plan on
the driver -> skip units the ledger has -> submit the rest, bounded in flight, retried -> record
each finished unit -> finish on the driver) and, when anything fails, rolls back what the run
created and says the failure in one line. A failed unit does not stop the others; the step fails at
the end with a summary naming task, unit and the worker's error.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ...errors import OutputLockedError, StepFailedError, ZarrmillError
from ...io.storage.guard import OutputGuard, open_guard
from ...io.storage.handles import writing_below
from ...io.storage.location import traits_of
from ...io.storage.object_store import server_failure
from ..core.budget import PlanSize
from ..core.contract import Task, TaskParams
from ..core.ledger import StepRecord
from ..core.locks import Lease, Locked, open_lock
from ..core.resume import step_record
from .step_run import StepOptions, StepReport, StepRun

log = logging.getLogger("zarrmill")


def run_step(step: str, task: Task, params: TaskParams, get_client: Callable[[PlanSize], Any],
             opts: StepOptions) -> StepReport:
    """Run every not-yet-done unit of ``step`` on ``get_client(plan)`` (called only if there is
    work, with the size of what is left; it may return None to run the units inline on the driver)."""
    t0 = time.monotonic()
    root = params.ledger_root()
    rec = step_record(task, params, root)
    guard = open_guard(root, params.input_paths(), in_place=params.writes_in_place())
    guard.check()  # refuses unsafe outputs before anything is read or written
    lock = _lock_output(step, guard)
    try:
        place = guard.place  # handles.py: every write below the root goes through a handle of it
        with writing_below(root, getattr(place, "identity", None), getattr(place, "real_root", None)):
            if opts.growing is not None:
                return opts.growing.follow(lambda: _run_locked(step, task, params, get_client, opts, guard, lock,
                                                               step_record(task, params, root), time.monotonic()))
            return _run_locked(step, task, params, get_client, opts, guard, lock, rec, t0)
    except BaseException as err:
        if _unnamed_os_error(err):  # a full disk, said by a write that names no file
            err.filename = str(guard.root)
        failure = None if isinstance(err, ZarrmillError) else server_failure(root, err)
        try:
            guard.rollback()  # what this run created before failing (a new root, a failed plan's nodes)
        except Exception:  # noqa: BLE001 - a server that is gone cannot be cleaned now; the rerun resumes
            if failure is None:
                raise
        finally:
            _release(lock, root)
            guard.remove_made_folders()  # rmdir, once the lock is gone from the bookkeeping folder
        if failure is not None and isinstance(err, Exception):
            raise StepFailedError(f"step '{step}' ({task.name}): {failure}; rerun once it is "
                                  f"resolved: the units done so far are kept") from err
        raise
    finally:
        _release(lock, root)


def _release(lock: Lease, root: Any) -> None:
    """Let go of the run lock (a second call does nothing)."""
    try:
        lock.release()
    except Exception as err:  # noqa: BLE001 - a lock left on a server goes stale; the next run takes it over
        if not traits_of(root).server_may_be_gone:
            raise
        log.warning("could not remove the run lock of %s (%s); it goes stale by itself", root, type(err).__name__)


def _unnamed_os_error(err: BaseException) -> bool:
    """An error of the operating system (not one of zarrmill's own, some of which are OSErrors)
    that names no file."""
    return (isinstance(err, OSError) and not isinstance(err, ZarrmillError) and err.errno is not None
            and err.filename is None)


def _lock_output(step: str, guard: OutputGuard) -> Lease:
    """One run at a time per output: the lock (in the bookkeeping folder), then the claim under it
    (two runs starting at one instant never both write an owner marker)."""
    guard.prepare()
    lock = open_lock(guard.lock_path)
    try:
        lock.acquire()
    except Locked as err:
        guard.withdraw()  # without the lock nothing of the output is ours to delete
        guard.remove_made_folders()
        raise OutputLockedError(f"{guard.root}: another zarrmill run is writing this output ({err}); wait for "
                                "it to end, or choose another output") from None
    return lock


def _run_locked(step: str, task: Task, params: TaskParams, get_client: Callable[[PlanSize], Any],
                opts: StepOptions, guard: OutputGuard, lock: Lease, rec: StepRecord, t0: float) -> StepReport:
    return StepRun(step, task, params, get_client, opts, guard, lock, rec, t0).run()
