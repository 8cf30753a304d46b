"""The engine: run one step of any task on any dask ``Client`` (or inline, for ``sync``).

plan on the driver -> skip units the ledger has -> submit the rest (bounded in flight, retried)
-> record each finished unit -> finish on the driver. A failed unit does not stop the others; the
step fails at the end with a summary naming task, unit and the worker's error.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import OutputLockedError, StepFailedError, ZarrmillError
from ...io.storage.fingerprint import changed_files, describe_changes, fingerprint
from ...io.storage.guard import OutputGuard, open_guard
from ...io.storage.location import traits_of
from ...io.storage.object_store import server_failure
from ..core.budget import PlanSize, refuse_oversized
from ..core.contract import PlanContext, Task, TaskParams
from ..core.ledger import StepRecord, open_ledger
from ..core.resume import prepare_output, remove_partial_files, same_step, step_record
from ..core.locks import Lease, Locked, open_lock
from ..core.progress import Progress
from .unit_runners import runner_for
from ..core.saved_plan import FILE as PLAN_FILE, SavedPlan, plan_key
from ..core.unit_stream import UnitStream, as_stream

log = logging.getLogger("zarrmill")
MAX_FAILURES_SHOWN = 5


@dataclass
class StepOptions:
    overwrite: bool = False
    upstream_changed: bool = False  # a step this one needs did work: redo this one from scratch
    retries: int = 1
    max_in_flight: int | None = None
    quiet: bool = False
    # called after finish(), before the step is marked done: (step, task name, params)
    provenance: Callable[[str, str, TaskParams, str | None], None] | None = None
    error_log: Path | None = None  # failed units' tracebacks (set per step by the engine)
    # why the cluster lost workers (out of memory, walltime, as the scheduler says), asked when units failed with them
    explain_lost_workers: Callable[[], str] | None = None
    # bytes of unit data one worker may hold (runtime/core/budget.py); None: unknown, nothing constrained
    unit_budget: Callable[[], int | None] | None = None
    budget_setting: str = "executor.memory_limit"
    _budget: int | None = None  # unit_budget() of the step being run
    plan: PlanSize | None = None  # the units left to run, for an executor that chooses by the plan
    # an input still being written (zarrmill follow, ingest_follow.Follower): run_step runs the step
    # once per poll under one lock; its plan takes what is ready; done only after the final poll
    growing: Any = None


@dataclass
class StepReport:
    step: str
    task: str
    n_units: int
    skipped: int
    ran: int
    seconds: float
    bytes: int = 0
    unit_seconds: float = 0.0  # time spent running units (without planning, start-up, finish)
    was_done: bool = False  # the step was done before this run, with these parameters and inputs
    failures: list[str] = field(default_factory=list)


def run_step(step: str, task: Task, params: TaskParams, get_client: Callable[[], Any],
             opts: StepOptions) -> StepReport:
    """Run every not-yet-done unit of ``step`` on ``get_client()`` (called only if there is work;
    it may return None to run the units inline on the driver)."""
    t0 = time.monotonic()
    root = params.ledger_root()
    rec = step_record(task, params, root)
    guard = open_guard(root, params.input_paths(), in_place=params.writes_in_place())
    guard.check()  # refuses unsafe outputs before anything is read or written
    lock = _lock_output(step, guard)
    try:
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


def _run_locked(step: str, task: Task, params: TaskParams, get_client: Callable[[], Any], opts: StepOptions,
                guard: OutputGuard, lock: Lease, rec: StepRecord, t0: float) -> StepReport:
    guard.claim(step)  # under the lock: a failure from here on is rolled back by run_step
    root = guard.root
    ledger = open_ledger(root, step)
    opts.error_log = ledger.error_log()
    old = ledger.record() if guard.owned() or guard.in_place else None
    growing = opts.growing
    following = growing is not None and not growing.final
    same = same_step(task, old, rec, root, params.input_paths())
    rec.inputs = fingerprint(params.input_paths(), skip=[root]) if not following or (
        same and old.state == "done") else {}  # (following a finished plate: done if its files are as they were)
    changed = changed_files(old.inputs, rec.inputs) if old is not None and old.inputs else []
    if same and old.state == "done" and not opts.upstream_changed and not changed:
        _say(opts, f"[{step}] already done ({old.n_units} units), skipping")
        return StepReport(step, task.name, old.n_units, old.n_units, 0, 0.0, was_done=True)
    if following:  # a growing input changes at every poll: its units carry each well's version instead
        rec.inputs, changed = {}, []
    if same and changed:
        _say(opts, f"[{step}] inputs changed since the last run: {describe_changes(changed)}; redoing its units")
    resume = prepare_output(step, guard, ledger, old, rec, same, opts.overwrite, opts.upstream_changed)

    saved = SavedPlan(ledger.dir / PLAN_FILE, plan_key(task.name, task.version, rec.params, rec.inputs),
                      usable=resume and not changed and growing is None)
    ctx = PlanContext(step=step, resume=resume, overwrite=opts.overwrite or opts.upstream_changed, guard=guard,
                      saved=saved if growing is None else None, growing=growing)
    done = ledger.done_ids() if resume and not changed else set()
    rec.state = "planning"
    guard.make_dirs(ledger.dir)
    first_poll = growing is None or growing.polls <= 1  # a follower's later polls: nothing was killed since
    if resume and first_poll and not traits_of(root).whole_writes:  # else no temp file is ever left
        remove_partial_files(guard)
    ledger.write_record(rec)  # before the plan creates anything: a kill now still resumes
    lock.check()
    plan = as_stream(task.plan(params, ctx))  # a failure here is rolled back by run_step
    _check_unique_ids(task.name, plan)
    opts._budget = opts.unit_budget() if opts.unit_budget else None
    if opts._budget is not None and plan.size().largest > opts._budget:  # rolled back like a failed plan
        refuse_oversized(task.name, [plan.largest_unit()], opts._budget, opts.budget_setting,
                         type(params).model_fields)
    guard.commit()  # the plan's nodes stay from here on: units write into them
    if not resume or changed:
        ledger.clear_done()
        done = set()
    rec.n_units, rec.state = len(plan), "running"
    ledger.write_record(rec)
    skipped = sum(1 for i in plan.ids() if i in done) if done else 0
    report = StepReport(step, task.name, len(plan), skipped, 0, 0.0)
    _say(opts, f"[{step}] task {task.name}: {len(plan)} units, {report.skipped} already done")

    opts.plan = plan.size().left(len(plan) - skipped)  # a resume sizes for what is left
    client = get_client() if skipped < len(plan) else None
    if client is not None:
        from .executors import describe_client

        _say(opts, f"[{step}] {describe_client(client)}")
    progress = Progress(step, len(plan), report.skipped, stream=sys.stderr)
    t_units = time.monotonic()
    try:
        runner = runner_for(client)
        for stage in plan.stages():
            todo = plan.units(stage, skip=done)  # done units are not even made
            for unit, nbytes, error in runner(task, params, todo, client, opts):
                lock.check()  # taken over by another run: stop before recording or writing more
                if error is None:
                    ledger.mark_done([unit["id"]])
                    report.ran += 1
                    report.bytes += nbytes
                else:
                    report.failures.append(error)
                progress.advance(nbytes, failed=error is not None)
            if report.failures:
                break  # later stages read what this one writes
            ledger.flush()
    finally:
        report.unit_seconds = time.monotonic() - t_units
        progress.close()
        ledger.close()
    if report.failures:
        why = opts.explain_lost_workers() if opts.explain_lost_workers and _lost_workers(report) else ""
        raise StepFailedError(_failure_summary(step, report) + (f"; {why}" if why else "")
                              + f"; full log: {opts.error_log}")
    lock.check()
    if task.finish is not None:
        task.finish(params, ctx)
    if growing is not None and not growing.final:  # valid and viewable as far as it goes; not done
        rec.state = "following"
        ledger.write_record(rec)
        report.seconds = time.monotonic() - t0
        return report
    if opts.provenance is not None:
        opts.provenance(step, task.name, params, guard.owner_id())  # before "done": a kill in between redoes it
        guard.seal()  # the store now names its owner marker itself
    rec.state = "done"
    ledger.write_record(rec)
    report.seconds = time.monotonic() - t0
    return report


def _lost_workers(report: StepReport) -> bool:
    """A unit failed because the worker running it died (distributed's KilledWorker)."""
    return any("KilledWorker" in failure or "worker" in failure.lower() and "died" in failure.lower()
               for failure in report.failures)


def _check_unique_ids(task_name: str, plan: UnitStream) -> None:
    seen: set[str] = set()
    for unit_id in plan.ids():
        if unit_id in seen:
            raise RuntimeError(f"task {task_name} planned duplicate unit ids (a bug in the task)")
        seen.add(unit_id)
    json.dumps(next(plan.units(), None))  # units must be JSON-able: fail on the driver, not on a worker


def _failure_summary(step: str, report: StepReport) -> str:
    shown = "; ".join(report.failures[:MAX_FAILURES_SHOWN])
    more = len(report.failures) - MAX_FAILURES_SHOWN
    extra = f"; and {more} more" if more > 0 else ""
    return (f"step '{step}' ({report.task}): {len(report.failures)} of {report.n_units} units failed "
            f"({report.ran} done this run; rerun to retry only the failed ones): {shown}{extra}")


def _say(opts: StepOptions, msg: str) -> None:
    if not opts.quiet:
        print(msg, file=sys.stderr, flush=True)
