"""How the units of a step run: inline on the driver (``sync``), on a pool of threads in this process
(``auto`` for plans that fit here), or on a dask ``Client`` (processes, batch jobs, an address).
Each runner yields ``(unit, bytes written, error or None)`` as units finish; the engine records them."""
from __future__ import annotations

import logging
import os
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator

from ...errors import UnitError, ZarrmillError
from ...io.storage.damaged import damaged_line
from ...io.storage.handles import writing_below
from ...io.storage.permissions import keep_writes_private
from ...io.storage.secrets import redact
from ..core.budget import resources_for, unit_memory
from ..core.contract import Task, TaskParams, Unit
from ..core.malloc import return_freed_memory, use_profile
from ..core.units import describe, run_unit_of, unit_allocator, unit_id
from .registry import get_task

log = logging.getLogger("zarrmill")


@lru_cache(maxsize=32)
def _params_on_worker(task_name: str, params_json: str) -> TaskParams:
    return get_task(task_name).params_model.model_validate_json(params_json)


def execute_unit(task_name: str, params_json: str, unit: Unit, store_id: str | None = None) -> int:
    """What a worker runs: one unit. Errors come back as one line naming task, unit and region,
    redacted here, on the worker: the line goes to the terminal, the ledger and the worker's log."""
    return_freed_memory()  # a worker started without zarrmill's environment (once per process)
    keep_writes_private()  # nobody else may rename inside what this worker creates (once per process)
    use_profile(unit_allocator(unit))
    task = get_task(task_name)
    params = _params_on_worker(task_name, params_json)
    try:
        with writing_below(params.ledger_root(), carries=store_id):  # only into the store carrying this id
            return run_unit_of(task.run_unit, params, unit)
    except Exception as err:  # noqa: BLE001 - re-raised as a one-line description
        where = describe(task.describe_unit, unit)
        said = damaged_line(err) or f"{type(err).__name__}: {err}"  # a chunk it cannot decode: which store
        raise UnitError(redact(f"task {task_name}, unit {unit_id(unit)} ({where}): {said}")) from err


def execute_with_retries(task_name: str, params_json: str, unit: Unit, retries: int,
                         store_id: str | None = None) -> int:
    """``execute_unit``, tried ``retries`` more times after a failure; the last failure is raised."""
    for attempt in range(retries):
        try:
            return execute_unit(task_name, params_json, unit, store_id)
        except UnitError:
            log.debug("unit %s attempt %d failed", unit_id(unit), attempt, exc_info=True)
    return execute_unit(task_name, params_json, unit, store_id)


def run_inline(task: Task, params: TaskParams, todo: list[Unit], client: Any, opts: Any
               ) -> Iterator[tuple[Unit, int, str | None]]:
    p_json = params.model_dump_json()
    for unit in todo:
        try:
            nbytes = execute_with_retries(task.name, p_json, unit, opts.retries, opts.store_id)
        except UnitError as err:
            log_failure(opts, unit, err)
            yield unit, 0, str(err)
            continue
        yield unit, nbytes, None


def run_on_client(task: Task, params: TaskParams, todo: list[Unit], client: Any, opts: Any
                   ) -> Iterator[tuple[Unit, int, str | None]]:
    """Keep a bounded window of units in flight; refill it in batches (one scheduler message per
    batch, not per unit) as results arrive."""
    from distributed import as_completed

    p_json = params.model_dump_json()
    limit = opts.max_in_flight or max(64, 8 * sum(client.nthreads().values()))
    run_id = uuid.uuid4().hex[:8]
    pending = iter(enumerate(todo))
    by_key: dict[str, Unit] = {}

    def submit(n: int) -> list[Any]:
        batch = _take(pending, n)
        if not batch:
            return []
        futures = []
        by_need: dict[int, list[tuple[int, Unit]]] = {}  # one map per memory size a unit declared
        for i, unit in batch:
            by_need.setdefault(unit_memory(unit), []).append((i, unit))
        for group in by_need.values():
            keys = [f"{task.name}-{run_id}-{i}" for i, _ in group]
            units = [u for _, u in group]
            by_key.update(zip(keys, units))
            futures += client.map(execute_unit, [task.name] * len(units), [p_json] * len(units), units,
                                  [opts.store_id] * len(units), key=keys, retries=opts.retries, pure=False,
                                  resources=resources_for(units[0], opts._budget))
        return futures

    # as_completed is given the client's loop, never made current: as_current sets dask's global
    # scheduler option, and two steps running at once (for-each datasets in threads) interleaved
    # their set and restore, leaving every later dask compute in the process asking for a client
    ac = as_completed(submit(limit), with_results=True, raise_errors=False, loop=client.loop)
    try:
        yield from _results(task, ac, by_key, submit, opts, client)
    finally:  # the step stopped early (a lost lock, an interrupt): units not yet run never start
        if by_key:
            try:
                client.cancel(list(ac.futures))
            except Exception:  # noqa: BLE001 - a cluster already gone has nothing left to cancel
                pass


def _batches(ac: Any, client: Any, opts: Any) -> Iterator[list[tuple[Any, Any]]]:
    """``as_completed``'s batches of finished units; meanwhile the pool is looked after
    (``opts.keep_pool``: lost batch jobs replaced, or why new ones cannot start raised), so a step
    whose every worker is gone never waits forever."""
    keep = opts.keep_pool
    while not ac.is_empty():
        if keep is not None:
            keep(client)  # looks at the queue every few seconds, whatever arrives
        batch = ac.next_batch(block=keep is None)
        if batch:
            yield batch
            continue
        with ac.thread_condition:
            ac.thread_condition.wait(timeout=0.5)


def _results(task: Task, ac: Any, by_key: dict[str, Unit], submit: Callable[[int], list[Any]], opts: Any,
             client: Any = None) -> Iterator[tuple[Unit, int, str | None]]:
    for batch in _batches(ac, client, opts):
        for fut, result in batch:
            unit = by_key.pop(fut.key)
            # a unit returns its byte count: one that arrived is good even if its worker died
            # since (status "lost"); a failure arrives as an exception or an exc_info tuple
            if isinstance(result, int) and not isinstance(result, bool):
                yield unit, result, None
            else:
                exc = _exception_of(result)
                log_failure(opts, unit, exc)
                yield unit, 0, _describe_future_error(task, unit, exc)
        ac.update(submit(len(batch)))


def _exception_of(result: Any) -> BaseException:
    if isinstance(result, BaseException):
        return result
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[1], BaseException):
        return result[1].with_traceback(result[2]) if result[2] is not None else result[1]
    return RuntimeError(f"the unit returned {result!r} instead of its byte count")


def log_failure(opts: Any, unit: Unit, exc: BaseException) -> None:
    """The whole traceback of a failed unit goes to the step's error log, not the terminal."""
    if opts.error_log is None:
        return
    import traceback

    opts.error_log.parent.mkdir(parents=True, exist_ok=True)
    cause = exc.__cause__ or exc
    text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    from ...io.storage.guard_fs import open_own_file

    # in the ledger's folder: never appended through a link a neighbour put there
    with open(open_own_file(opts.error_log, os.O_WRONLY | os.O_APPEND, private=True), "a", encoding="utf-8") as fh:
        fh.write(f"--- unit {unit_id(unit)} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        fh.write(redact(text))  # a signed URL in a reader's error stays out of the file


def _describe_future_error(task: Task, unit: Unit, exc: BaseException) -> str:
    """The failure line of a unit whose error did not come from ``execute_unit`` (a lost worker, a
    cancelled future), redacted like the lines execute_unit makes."""
    if isinstance(exc, ZarrmillError):
        line = str(exc)
    else:
        what = type(exc).__name__
        # distributed's KilledWorker message is a paragraph of advice; the cause follows it in the line
        message = "the worker running it died" if what == "KilledWorker" else str(exc)
        region = describe(task.describe_unit, unit)
        line = f"task {task.name}, unit {unit_id(unit)}{f' ({region})' if region else ''}: {what}: {message}"
    return redact(line)


def _take(it: Iterator[Any], n: int) -> list[Any]:
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


@dataclass
class InProcessPool:
    """Threads in this process, started per step (no dask scheduler, no worker processes, no
    distributed import): what ``auto`` picks for a plan that fits here. Units run ``threads`` at a
    time, and only while the bytes they declared fit in ``budget`` together (runtime/core/budget.py)."""

    threads: int
    budget: int | None
    why: str = ""

    def describe(self) -> str:
        return f"runs on {self.threads} threads in this process ({self.why})"


def run_in_threads(task: Task, params: TaskParams, todo: list[Unit], pool: InProcessPool, opts: Any
                   ) -> Iterator[tuple[Unit, int, str | None]]:
    p_json = params.model_dump_json()
    pending = iter(todo)
    held = 0  # declared bytes of the units running now (changed only here, in the driver's thread)
    running: dict[Future, tuple[Unit, int]] = {}

    def fits(need: int) -> bool:
        return not running or pool.budget is None or held + need <= pool.budget

    with ThreadPoolExecutor(max_workers=pool.threads, thread_name_prefix=f"zarrmill-{task.name}") as threads:
        waiting: Unit | None = None
        try:
            while True:
                while len(running) < pool.threads:  # start what the threads and the budget allow
                    unit = waiting if waiting is not None else next(pending, None)
                    waiting = None
                    if unit is None:
                        break
                    need = unit_memory(unit)
                    if not fits(need):
                        waiting = unit  # the next unit waits for memory: order is kept
                        break
                    held += need
                    running[threads.submit(execute_with_retries, task.name, p_json, unit, opts.retries,
                                           opts.store_id)] = (unit, need)
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit, need = running.pop(fut)
                    held -= need
                    err = fut.exception()
                    if err is None:
                        yield unit, int(fut.result()), None
                    else:
                        log_failure(opts, unit, err)
                        yield unit, 0, _describe_future_error(task, unit, err)
        finally:  # stopped early (a lost lock, an interrupt): units not yet started never start
            for fut in running:
                fut.cancel()


def runner_for(client: Any) -> Callable[..., Iterator[tuple[Unit, int, str | None]]]:
    if client is None:
        return run_inline
    if isinstance(client, InProcessPool):
        return run_in_threads
    return run_on_client
