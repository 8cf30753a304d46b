"""One step's run under its output lock, as the list of its moves (core/step_states.py):

claim -> already done? -> plan (record ``planning`` first, commit the plan's nodes) -> units (record
``running``, each finished unit marked done) -> finish (``finish()``, provenance and seal, then
``done``; a growing input's poll ends ``following``).

The engine (engine.py) takes the lock and rolls back a failure; this module never changes the
caller's options: what one step learns (its error log, budget, plan size) is in its own copy."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import StepFailedError
from ...io.storage.fingerprint import changed_files, describe_changes, fingerprint
from ...io.storage.guard import OutputGuard
from ...io.storage.handles import claimed
from ...io.storage.location import traits_of
from ..core.budget import PlanSize, refuse_oversized
from ..core.contract import PlanContext, Task, TaskParams
from ..core.ledger import Ledger, StepRecord, open_ledger
from ..core.locks import Lease
from ..core.progress import Progress
from ..core.resume import prepare_output, remove_partial_files, same_step
from ..core.saved_plan import FILE as PLAN_FILE, SavedPlan, plan_key
from ..core.step_states import DONE, FOLLOWING, PLANNING, RUNNING, move
from ..core.unit_stream import UnitStream, as_stream
from ..core.units import fields_of, unit_id
from .unit_runners import runner_for

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
    # asked while units wait on a client: a batch pool replaces ended jobs, or raises why it cannot
    keep_pool: Callable[[Any], None] | None = None
    store_id: str | None = None  # the owner id the output carries: workers write only into a store carrying it
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


@dataclass
class StepRun:
    step: str
    task: Task
    params: TaskParams
    get_client: Callable[[PlanSize], Any]
    opts: StepOptions
    guard: OutputGuard
    lock: Lease
    rec: StepRecord
    t0: float
    ledger: Ledger | None = None
    old: StepRecord | None = None
    resume: bool = False
    changed: list[str] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    ctx: PlanContext | None = None
    units: UnitStream | None = None
    report: StepReport | None = None

    def run(self) -> StepReport:
        self.claim()
        earlier = self.already_done()
        if earlier is not None:
            return earlier
        self.plan()
        self.run_units()
        return self.finish()

    def claim(self) -> None:
        """Under the lock: the output is this run's (a failure from here on is rolled back)."""
        self.guard.claim(self.step)
        store_id = self.guard.owner_id()
        claimed(self.params.ledger_root(), store_id)  # what workers check the store they write carries
        self.ledger = open_ledger(self.guard.root, self.step)
        self.opts = dataclasses.replace(self.opts, error_log=self.ledger.error_log(), store_id=store_id)
        self.old = self.ledger.record() if self.guard.owned() or self.guard.in_place else None

    def already_done(self) -> StepReport | None:
        """The report of a step done with these parameters and inputs, else None (and what a rerun
        must redo: the inputs that changed)."""
        old, rec, growing = self.old, self.rec, self.opts.growing
        following = growing is not None and not growing.final
        same = same_step(self.task, old, rec, self.guard.root, self.params.input_paths())
        # following a finished plate: done if its files are as they were
        rec.inputs = fingerprint(self.params.input_paths(), skip=[self.guard.root]) \
            if not following or (same and old.state == DONE) else {}
        self.changed = changed_files(old.inputs, rec.inputs) if old is not None and old.inputs else []
        if same and old.state == DONE and not self.opts.upstream_changed and not self.changed:
            self._say(f"[{self.step}] already done ({old.n_units} units), skipping")
            return StepReport(self.step, self.task.name, old.n_units, old.n_units, 0, 0.0, was_done=True)
        if following:  # a growing input changes at every poll: its units carry each well's version instead
            rec.inputs, self.changed = {}, []
        if same and self.changed:
            self._say(f"[{self.step}] inputs changed since the last run: {describe_changes(self.changed)}; "
                      "redoing its units")
        self.resume = prepare_output(self.step, self.guard, self.ledger, old, rec, same, self.opts.overwrite,
                                     self.opts.upstream_changed)
        return None

    def plan(self) -> None:
        """``planning`` is recorded before the plan creates anything; the plan's nodes are committed
        only once it is valid and fits the workers' budget; done units are forgotten only after."""
        opts, growing, ledger = self.opts, self.opts.growing, self.ledger
        fresh = self.resume and not self.changed
        saved = SavedPlan(ledger.dir / PLAN_FILE, plan_key(self.task.name, self.task.version, self.rec.params,
                                                           self.rec.inputs), usable=fresh and growing is None)
        self.ctx = PlanContext(step=self.step, resume=self.resume, overwrite=opts.overwrite or opts.upstream_changed,
                               guard=self.guard, saved=saved if growing is None else None, growing=growing)
        self.done = ledger.done_ids() if fresh else set()
        if self.changed:  # units done from other inputs: forgotten before the record names the new ones,
            ledger.clear_done()  # so a run killed while planning never reruns to the old input's units
        self.guard.make_dirs(ledger.dir)
        first_poll = growing is None or growing.polls <= 1  # a follower's later polls: nothing was killed since
        if self.resume and first_poll and not traits_of(self.guard.root).whole_writes:  # else no temp file is left
            remove_partial_files(self.guard)
        self._record(PLANNING)
        self.lock.check()
        self.units = as_stream(self.task.plan(self.params, self.ctx))
        _check_unique_ids(self.task.name, self.units)
        budget = opts.unit_budget() if opts.unit_budget else None
        self.opts = dataclasses.replace(opts, _budget=budget)
        if budget is not None and self.units.size().largest > budget:  # rolled back like a failed plan
            refuse_oversized(self.task.name, [self.units.largest_unit()], budget, opts.budget_setting,
                             type(self.params).model_fields)
        self.ctx.create_nodes()  # the plan is whole and fits: only now is its skeleton written
        self.guard.commit()  # the plan's nodes stay from here on: units write into them
        if not fresh:
            ledger.clear_done()
            self.done = set()
        self.rec.n_units = len(self.units)
        self._record(RUNNING)

    def run_units(self) -> None:
        """Each unit not done yet, stage by stage; a unit is marked done after it wrote, and only
        while the lock is still this run's."""
        units, ledger = self.units, self.ledger
        skipped = sum(1 for i in units.ids() if i in self.done) if self.done else 0
        report = self.report = StepReport(self.step, self.task.name, len(units), skipped, 0, 0.0)
        self._say(f"[{self.step}] task {self.task.name}: {len(units)} units, {skipped} already done")
        self.opts = dataclasses.replace(self.opts, plan=units.size().left(len(units) - skipped))  # what is left
        client = self.get_client(self.opts.plan) if skipped < len(units) else None
        if client is not None:
            from .executors import describe_client

            self._say(f"[{self.step}] {describe_client(client)}")
        progress = Progress(self.step, len(units), skipped, stream=sys.stderr)
        t_units = time.monotonic()
        try:
            runner = runner_for(client)
            for stage in units.stages():
                for unit, nbytes, error in runner(self.task, self.params, units.units(stage, skip=self.done),
                                                  client, self.opts):
                    self.lock.check()  # taken over by another run: stop before recording or writing more
                    if error is None:
                        ledger.mark_done([unit_id(unit)])
                        report.ran, report.bytes = report.ran + 1, report.bytes + nbytes
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
            why = self.opts.explain_lost_workers() if self.opts.explain_lost_workers and _lost_workers(report) else ""
            raise StepFailedError(_failure_summary(self.step, report) + (f"; {why}" if why else "")
                                  + f"; full log: {self.opts.error_log}")

    def finish(self) -> StepReport:
        """``finish()``, then (a growing input: ``following``) provenance and the owner's seal, then
        ``done``: a kill before ``done`` redoes the finish, never serves a half-finished output."""
        self.lock.check()
        if self.task.finish is not None:
            self.task.finish(self.params, self.ctx)
        growing = self.opts.growing
        if growing is not None and not growing.final:  # valid and viewable as far as it goes; not done
            self._record(FOLLOWING)
        else:
            if self.opts.provenance is not None:
                self.opts.provenance(self.step, self.task.name, self.params, self.guard.owner_id())
                self.guard.seal()  # the store now names its owner marker itself
            self._record(DONE)
        self.report.seconds = time.monotonic() - self.t0
        return self.report

    def _record(self, state: str) -> None:
        """The record written in its next state (an order the state moves allow)."""
        self.rec.state = move(self.rec.state if state != PLANNING else (self.old.state if self.old else None), state)
        self.ledger.write_record(self.rec)

    def _say(self, msg: str) -> None:
        if not self.opts.quiet:
            print(msg, file=sys.stderr, flush=True)


def _lost_workers(report: StepReport) -> bool:
    """A unit failed because the worker running it died (distributed's KilledWorker)."""
    return any("KilledWorker" in failure or "worker" in failure.lower() and "died" in failure.lower()
               for failure in report.failures)


def _check_unique_ids(task_name: str, plan: UnitStream) -> None:
    seen: set[str] = set()
    for uid in plan.ids():
        if uid in seen:
            raise RuntimeError(f"task {task_name} planned duplicate unit ids (a bug in the task)")
        seen.add(uid)
    json.dumps(None if (first := next(plan.units(), None)) is None else fields_of(first))  # units must be JSON-able: fail on the driver, not on a worker


def _failure_summary(step: str, report: StepReport) -> str:
    shown = "; ".join(report.failures[:MAX_FAILURES_SHOWN])
    more = len(report.failures) - MAX_FAILURES_SHOWN
    extra = f"; and {more} more" if more > 0 else ""
    return (f"step '{step}' ({report.task}): {len(report.failures)} of {report.n_units} units failed "
            f"({report.ran} done this run; rerun to retry only the failed ones): {shown}{extra}")
