"""Writes to a bucket that run while the unit goes on computing: a bounded queue per unit.

Against a server each write block is an encode and a PUT, a round trip the unit would otherwise
wait for before it composes or downsamples the next piece. Inside ``writes_in_flight`` (put on a
task's ``run_unit``) ``write_region`` hands each block of an array in a bucket to a few upload
threads and returns; the unit's memory grows by at most ``IN_FLIGHT_BYTES`` of block copies, and
the unit waits when that much is on its way (a block of more than half of it is written by the unit
itself, uncopied, while the queued ones go on). Two writes to one object are never in flight at
once: the second waits for the first (a partial shard is a read, merge and put of the whole).

The unit is done only once every one of its writes is: the decorator waits for all of them before
``run_unit`` returns, and the first failed write fails the unit (a unit reported done has all of
its bytes stored; one killed at any instant reruns to the same result). On disk nothing changes:
tensorstore writes there, in its own threads."""
from __future__ import annotations

import functools
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Callable, Hashable, ParamSpec, TypeVar

# bytes of block copies on their way per unit: ~24 plane chunks of 0.7 MB, enough to keep the
# upload threads busy while the next ones are made; a larger block is written where it is (no copy)
IN_FLIGHT_BYTES = 16 * 2**20
THREADS = 8  # uploads of the whole process at once (zarr's event loop does the requests)

P = ParamSpec("P")
R = TypeVar("R")

_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(THREADS, thread_name_prefix="zarrmill-upload"))
        return _POOL[0]


def _after_fork() -> None:
    """A forked child has the pool's objects but none of its threads, and maybe a held lock."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


os.register_at_fork(after_in_child=_after_fork)


class Uploads:
    """The writes one unit has handed over and not yet seen stored."""

    def __init__(self, limit: int = IN_FLIGHT_BYTES):
        self.limit = limit
        self.pending: deque[tuple[Future[None], int]] = deque()
        self.in_flight = 0
        self.by_block: dict[Hashable, Future[None]] = {}

    def submit(self, write: Callable[[], None], nbytes: int, block: Hashable = None) -> None:
        """Run ``write`` on an upload thread; first wait (oldest first) until ``nbytes`` more fit,
        and for the last write to the same ``block`` (an object in the bucket): a partial write of
        a shard or chunk reads, merges and puts the whole object, so two such writes in flight at
        once would each put back the object without the other's pixels. A write that failed
        meanwhile is raised here, so the unit stops early."""
        while self.pending and (self.in_flight + nbytes > self.limit or self.pending[0][0].done()):
            self._wait_oldest()
        self.wait_for(block)
        future = _pool().submit(write)
        self.pending.append((future, nbytes))
        self.in_flight += nbytes
        if block is not None:
            self.by_block[block] = future

    def wait_for(self, block: Hashable) -> None:
        """Wait until the last write handed over to ``block`` has ended (raising its error)."""
        earlier = self.by_block.get(block) if block is not None else None
        if earlier is not None:
            earlier.result()

    def _wait_oldest(self) -> None:
        future, nbytes = self.pending.popleft()
        self.in_flight -= nbytes
        if not self.pending:
            self.by_block.clear()  # nothing in flight: no write left to wait for
        future.result()

    def drain(self) -> None:
        """Wait for every write; the first error is raised (after all have ended)."""
        first: BaseException | None = None
        while self.pending:
            try:
                self._wait_oldest()
            except BaseException as err:  # noqa: BLE001 - every write ends before the unit does
                first = first or err
        if first is not None:
            raise first


_CURRENT: ContextVar[Uploads | None] = ContextVar("zarrmill_uploads", default=None)


def current() -> Uploads | None:
    """The running unit's queue, or None outside ``writes_in_flight`` (then writes wait)."""
    return _CURRENT.get()


def writes_in_flight(run_unit: Callable[P, R]) -> Callable[P, R]:
    """``run_unit`` with its writes to a bucket in flight while it computes, all of them stored
    before it returns (or raises: a unit that failed leaves no write running behind it)."""

    @functools.wraps(run_unit)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _CURRENT.get() is not None:  # a unit calling another task's run_unit: one queue
            return run_unit(*args, **kwargs)
        queue = Uploads()
        token = _CURRENT.set(queue)
        try:
            result = run_unit(*args, **kwargs)
        except BaseException:
            _CURRENT.reset(token)
            _drain_quietly(queue)
            raise
        _CURRENT.reset(token)
        queue.drain()
        return result

    return wrapper


def _drain_quietly(queue: Uploads) -> None:
    """After the unit failed: its writes end too, and the unit's own error is the one raised."""
    try:
        queue.drain()
    except BaseException:  # noqa: BLE001 - the unit's error says more than a write's after it
        pass
