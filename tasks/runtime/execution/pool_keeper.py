"""A batch pool kept at the size its step asked for while units remain.

A cluster ends worker jobs on a bad day: at their walltime, by preemption, with a node, by a
colleague's or an admin's ``scancel``. dask-jobqueue replaces none of them by itself (a pool of
fixed size stays at the jobs it submitted once; an adaptive pool still counts the lost ones), and a
step whose every worker is gone waited forever. The keeper, asked by the step while it waits for
units (``check``, at most every few seconds), looks at the pool's jobs as the scheduler lists them:
one that ended is taken out of the pool's plan, and the pool is scaled back to its size (fixed
pools; adaptive ones scale themselves once the lost job no longer counts), so new jobs take the
units that were left. It ends the run, in one line, only when new jobs cannot start either: a
pending job whose reason never clears by waiting (a limit of the partition, an account it may not
use) while no worker of the pool runs, several jobs in a row that ended before their worker ever
connected, no worker for ``worker_start_timeout`` while every job waits for nodes that may not come
back, or one unit that was running on three jobs that ended (it outlives any job)."""
from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ...errors import ConfigError, ExecutorError
from .schedulers.base import Scheduler, SchedulerCommandError, tail_file

log = logging.getLogger("zarrmill")

CHECK_EVERY = 3.0  # seconds between two looks at the queue (one squeue call each)
FAILED_STARTS = 3  # jobs in a row that ended before their worker connected: new jobs cannot start
LOST_UNDER_A_UNIT = 3  # jobs that ended while running one same unit: that unit outlives any job
GONE_TWICE = 2  # a job the scheduler no longer lists counts as ended when seen missing this often


def job_ids(cluster: Any) -> dict[str, str]:
    """{pool member's name: its batch job id} of the jobs submitted so far."""
    return {str(name): str(job.job_id) for name, job in list(cluster.workers.items())
            if getattr(job, "job_id", None)}


def member_of(worker_name: str, member: str) -> bool:
    """A job's worker names: the member's own, or ``member-0``, ``member-1``, ... for a job of
    several worker processes."""
    return worker_name == member or worker_name.startswith(f"{member}-")


class PoolKeeper:
    def __init__(self, batch: Scheduler, cluster: Any, client: Any, jobs: int | None, log_dir: Path,
                 start_timeout: float = 300.0):
        self.batch, self.cluster, self.client = batch, cluster, client
        self.jobs = jobs  # a fixed pool's size; None: adaptive (dask scales it)
        self.log_dir = log_dir
        self.start_timeout = start_timeout  # executor.worker_start_timeout
        self._last = 0.0
        self._seen: set[str] = set()  # members whose worker connected at some point
        self._missing: dict[str, int] = {}  # member -> looks in a row its job was not listed
        self._known: dict[str, str] = {}  # member -> job id, at the last look
        self._failed_starts: list[str] = []  # jobs that ended before their worker connected, in a row
        self._running: dict[str, set[str]] = {}  # member -> the units (dask keys) its workers ran at the last look
        self._lost_under: dict[str, list[str]] = {}  # unit key -> the jobs that ended while running it
        self._unsure_since: float | None = None  # no worker, and jobs waiting for a reason that may not clear
        self._waiting_said = ""
        self._looking = threading.Lock()

    def check(self) -> None:
        """Replace ended jobs; raise when new jobs cannot start, or when one unit outlives the jobs
        that run it (module doc)."""
        if not self._looking.acquire(blocking=False):
            return  # a step in another thread (for-each datasets share a pool) is looking now
        try:
            self._check()
        finally:
            self._looking.release()

    def _check(self) -> None:
        now = time.monotonic()
        if now - self._last < CHECK_EVERY:
            return
        self._last = now
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
            # the units each worker is executing now (``processing`` also lists those only queued there)
            processing = self.client.call_stack()
        except Exception:  # noqa: BLE001 - the scheduler is closing (an interrupt): nothing to keep
            return
        connected = {str(w.get("name")) for w in workers.values()}
        jobs = job_ids(self.cluster)
        self._seen |= {m for m in jobs if any(member_of(w, m) for w in connected)}
        self._note_running(jobs, connected, workers, processing)
        # a member dask itself closed (its worker left and did not come back within
        # distributed.deploy.lost-worker-timeout) is gone from the pool's jobs but still planned
        closed = [(m, job_id, "ended") for m, job_id in self._known.items()
                  if m not in jobs and m in self.cluster.worker_spec]
        self._known = dict(jobs)
        states = self.queue_states(list(jobs.values()), connected)
        ended = closed
        for member, job_id in jobs.items() if states is not None else ():
            state, reason = states.get(job_id, ("", ""))
            if any(member_of(w, member) for w in connected) or member not in self.cluster.worker_spec:
                self._missing.pop(member, None)
                continue  # its worker is there (whatever the queue says), or it was taken out already
            if state and state not in self.batch.ended_states:
                self._missing.pop(member, None)
                continue
            if not state:  # no longer listed: ended, once seen missing twice (a slow scheduler)
                self._missing[member] = self._missing.get(member, 0) + 1
                if self._missing[member] < GONE_TWICE:
                    continue
            ended.append((member, job_id, state or "ended"))
        if ended:
            self._replace(ended, connected)
        if states is not None:  # a scheduler that did not answer says nothing about the wait
            planned = {job_id: states[job_id] for member, job_id in jobs.items()
                       if member in self.cluster.worker_spec and job_id in states}
            self._no_worker_for_long(connected, planned, now)
        if self.jobs is not None:
            # every look, not only after a loss: scaling to the size it has does nothing, and a
            # correction dask could not finish at once (a lost job still closing) is tried again
            self.cluster.scale(jobs=self.jobs)

    def _note_running(self, jobs: dict[str, str], connected: set[str], workers: dict[str, Any],
                      processing: dict[str, Any]) -> None:
        """Which units each member's workers execute now (``Client.call_stack``); a member whose
        worker is gone keeps what it ran at the last look (what its end interrupted)."""
        running: dict[str, set[str]] = {}
        for address, keys in processing.items():
            name = str(workers.get(address, {}).get("name"))
            member = next((m for m in jobs if member_of(name, m)), None)
            if member is not None:
                running.setdefault(member, set()).update(str(k) for k in keys)
        for member in jobs:
            if any(member_of(w, member) for w in connected):
                self._running[member] = running.get(member, set())

    def queue_states(self, ids: list[str], connected: set[str]) -> dict[str, tuple[str, str]] | None:
        """{job id: (state, reason)} as the scheduler lists them (None when it does not answer now);
        a pending job's reason is said once, or ends the run where it never clears and no worker
        of the pool is connected (ConfigError, exit 2)."""
        try:
            states = self.batch.job_states(ids)
        except SchedulerCommandError as err:
            log.warning("%s did not list the worker jobs (%s); looking again", self.batch.label, err)
            return None
        for job_id, (state, reason) in states.items():
            if state == "PENDING":
                self._pending(job_id, reason, connected)
        return states

    def _pending(self, job_id: str, reason: str, connected: set[str]) -> None:
        problem = self.batch.pending_problem(reason)
        if problem is not None and not connected:
            raise ConfigError(f"{self.batch.label} worker job {job_id} cannot start: it waits for {reason}, which "
                              f"never clears by waiting; {problem}")
        said = f"job {job_id} waits: {reason}" if reason else ""
        if said and said != self._waiting_said:
            self._waiting_said = said
            print(f"zarrmill: {self.batch.label} worker {said}", file=sys.stderr, flush=True)

    def _no_worker_for_long(self, connected: set[str], states: dict[str, tuple[str, str]], now: float) -> None:
        """No worker, and every job waiting for a reason that may never clear (nodes down, drained
        or reserved): after ``start_timeout`` seconds the run ends with those reasons (exit 1)."""
        unsure = [(job_id, reason) for job_id, (state, reason) in states.items()
                  if state == "PENDING" and self.batch.pending_unsure(reason)]
        if connected or not unsure or len(unsure) < len(states):
            self._unsure_since = None
            return
        self._unsure_since = self._unsure_since or now
        if now - self._unsure_since > self.start_timeout:
            detail = "; ".join(f"job {job_id} PENDING ({reason})" for job_id, reason in unsure)
            raise ExecutorError(f"no {self.batch.label} worker for {self.start_timeout:.0f}s while units remain: "
                                f"{detail}; the nodes may come back (ask the cluster's admins), then rerun")

    def _replace(self, ended: list[tuple[str, str, str]], connected: set[str]) -> None:
        for member, job_id, state in ended:
            self._missing.pop(member, None)
            if member in self._seen:
                self._failed_starts.clear()
            else:
                self._failed_starts.append(self._start_failure(job_id, state))
            for key in self._running.pop(member, set()):
                self._lost_under.setdefault(key, []).append(f"{job_id} {state}")
        if len(self._failed_starts) >= FAILED_STARTS and not connected:
            raise ExecutorError(f"{len(self._failed_starts)} {self.batch.label} worker jobs in a row ended before "
                                f"their worker connected: {'; '.join(self._failed_starts[-FAILED_STARTS:])}")
        outlived = {key: lost for key, lost in self._lost_under.items() if len(lost) >= LOST_UNDER_A_UNIT}
        if outlived:
            key, lost = next(iter(outlived.items()))
            setting = f"executor.{self.batch.kind}.walltime (or a step's resources.walltime)"
            raise ExecutorError(f"{self.batch.label} worker jobs kept ending while one unit ran ({key}: on jobs "
                                f"{'; '.join(lost)}): a unit takes longer than a worker job may run; raise {setting}, "
                                "or make units smaller")
        # New jobs first, under new names (dask names a new job after the first name free in the
        # plan: taking the lost one out first would give its name again, and dask closes, a few
        # seconds later, whatever job then holds the name of a worker it saw leave); then the
        # lost ones out of the plan, which the next correction closes (scancel of an ended job
        # does nothing).
        self.cluster.scale(jobs=len(self.cluster.worker_spec) + len(ended))
        for member, _, _ in ended:
            self.cluster.worker_spec.pop(member, None)
        log.warning("%s: %d worker job(s) ended (%s); submitting new ones", self.batch.label, len(ended),
                    ", ".join(f"{job_id} {state}" for _, job_id, state in ended))

    def _start_failure(self, job_id: str, state: str) -> str:
        err_files = sorted(self.log_dir.glob(f"*{job_id}*.err"))
        err = tail_file(err_files[0]) if err_files else "(no .err log)"
        return f"job {job_id} {state}; {err_files[0] if err_files else self.log_dir}: {err}"
