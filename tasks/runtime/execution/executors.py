"""Executors only build dask Clients; the engine is the same on all of them.

``Executor.client_for(resources)`` returns the client a step runs on (None for ``sync``: inline;
an ``InProcessPool`` where ``auto`` chose threads in this process for the step's plan).
On a batch scheduler (any registered in schedulers/) each distinct set of step resources
gets its own dask-jobqueue cluster (a worker pool; jobqueue.py)."""
from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit


from ...errors import ConfigError, ExecutorError
from ..core.budget import MEMORY, PlanSize, budget_of
from .jobqueue import UNSET_TRIM, batch_unit_budget, fitting_pool, start_pool
from .pool_keeper import PoolKeeper
from .run_credentials import remove_run_credentials
from .schedulers import BATCH_KINDS, scheduler
from .local_kinds import POOL_KINDS, pool_kind
from .machine import available_cpus, available_memory
from ..core.rundirs import make_run_dir
from .spec import ExecutorSpec, Resources
from .unit_runners import InProcessPool

LOOPBACK = "127.0.0.1"
# the host each pool's dashboard listens on, where zarrmill chose it (dask's own link names the
# scheduler's network address, where a dashboard bound to 127.0.0.1 does not answer)
DASHBOARD_HOSTS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# ``auto``: a plan of at most this many bytes (all units together) is small whatever the task: worker
# processes would take longer to start (~2 s, and distributed's import ~0.9 s) than it to run
SMALL_PLAN = 256 << 20
CHOSEN: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()  # client -> why auto chose it


def describe_client(client: Any) -> str:
    """The one line a step prints about where its units run."""
    if isinstance(client, InProcessPool):
        return client.describe()
    why = CHOSEN.get(client)
    return f"dashboard: {dashboard_link(client)}" + (f" ({why})" if why else "")


def dashboard_link(client: Any) -> str:
    """A dashboard link that opens: on the host the dashboard listens on."""
    link = client.dashboard_link
    host = DASHBOARD_HOSTS.get(client)
    if not host or host in ("0.0.0.0", "::", "[::]"):
        return link
    parts = urlsplit(link)
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}")) if parts.port else link


class Executor:
    def __init__(self, spec: ExecutorSpec, name: str, run_dir: Path):
        self.spec = spec
        self.name = name
        self.run_dir = run_dir
        self._pools: dict[tuple, tuple[Any, Any]] = {}
        self.job_names: set[str] = set()  # worker job names, to say why a job ended
        self.started = time.time() - 1  # SubmitTime has whole seconds
        self._started_pools: dict[tuple, tuple[Resources | None, float]] = {}  # batch pool -> (resources, start)
        self.startups: list[float] = []  # seconds each batch pool waited for its first worker
        self._in_use: dict[tuple, int] = {}  # pool -> steps running on it
        self._last_used: dict[tuple, float] = {}  # pool -> when its last step ended (monotonic)
        self._chosen: dict[tuple, tuple] = {}  # (kind, step resources) -> the pool client_for gave
        self._lock = threading.Lock()  # for_each runs datasets in threads sharing this executor
        self._keepers: dict[int, PoolKeeper] = {}  # id(batch client) -> what keeps its pool's size
        self._made_run_dir = False  # this run made its run folder (a rejected run removes it again)
        self._credentials: list[Path] = []  # the TLS files this run wrote (run_credentials.py)

    def client_for(self, resources: Resources | None, workers: str = "processes", plan: PlanSize | None = None) -> Any:
        """``workers``: what the task runs best on. On the ``local`` executor a task whose units
        spend their time in GIL-free codecs ("threads": ingest, pyramid, reshard, ...) runs on
        threads in this process (no process start-up, no transfers); the others on processes.
        ``auto`` chooses by ``plan`` (auto_choice). Explicit ``threads``, batch and ``address``
        executors are used as configured."""
        kind = self._kind(workers)
        if _runs(kind) == "inline":
            return None
        why = ""
        if kind == "auto":
            kind, why = self.auto_choice(workers, plan)
            if _runs(kind) == "this process":
                return InProcessPool(self._local_workers(kind), budget_of(self._local_worker_memory(kind)), why)
        key = resources.key() if (kind in BATCH_KINDS and resources) else (kind,)
        with self._lock:
            self._release_idle()
            if key not in self._pools and kind in BATCH_KINDS and self.spec.reuse_workers:
                # a running pool whose jobs hold what this step needs (cores, memory, time left)
                # takes the step: no new jobs, no second wait in the queue
                key = fitting_pool(self.spec, resources, self._started_pools) or key
            if key not in self._pools:
                t0 = time.monotonic()
                self._pools[key] = self._start(resources, kind)
                if kind in BATCH_KINDS:
                    self._started_pools[key] = (resources, time.time())
                    self.startups.append(time.monotonic() - t0)
            self._in_use[key] = self._in_use.get(key, 0) + 1
            self._chosen[(kind, resources.key() if resources else None)] = key
            client = self._pools[key][1]
            if why:
                CHOSEN[client] = why
            return client

    def auto_choice(self, workers: str, plan: PlanSize | None) -> tuple[str, str]:
        """``auto``: threads in this process for a plan that fits here, worker processes for a larger
        one of a task that holds the GIL; the reason goes into the step's one line."""
        if workers == "threads":
            return "inprocess", "the task's units spend their time in codecs that release the GIL"
        if plan is None:
            return "local", "worker processes"
        if plan.units <= 1:
            return "inprocess", "one unit: nothing to spread over worker processes"
        size = f"{plan.units} units, {plan.total / 1e6:.0f} MB held in all" if plan.declared else f"{plan.units} units"
        if plan.declared and plan.total <= SMALL_PLAN:
            return "inprocess", f"{size}: less work than starting worker processes"
        if plan.largest > budget_of(self._local_worker_memory("local")):
            return "inprocess", f"{size}: a unit needs more than one worker process's share of memory"
        return "local", f"{size}: worker processes, {self._local_workers('local')} at once"

    def step_done(self, resources: Resources | None, workers: str = "processes") -> None:
        """A step finished with the pool ``client_for`` gave it: from now on that pool may idle out."""
        kind = self._kind(workers)
        with self._lock:
            key = self._chosen.get((kind, resources.key() if resources else None))
            if key in self._in_use:
                self._in_use[key] = max(0, self._in_use[key] - 1)
                self._last_used[key] = time.monotonic()

    def _release_idle(self) -> None:
        """Batch pools no step uses and none used for ``idle_timeout`` seconds end their jobs."""
        if not self.spec.idle_timeout:
            return
        now = time.monotonic()
        for key in [k for k in self._started_pools if not self._in_use.get(k)
                    and now - self._last_used.get(k, now) > self.spec.idle_timeout]:
            cluster, client = self._pools.pop(key)
            self._started_pools.pop(key)
            self._keepers.pop(id(client), None)
            client.close()
            cluster.close()

    def _kind(self, workers: str) -> str:
        kind = self.spec.kind
        sized = bool(self.spec.workers or self.spec.memory_limit)  # the user sized processes: keep them
        if kind == "auto" and sized:
            kind = "local"
        if kind == "local" and workers == "threads" and not sized:
            kind = "threads"
        return kind

    def unit_budget(self, resources: Resources | None, workers: str = "processes") -> int | None:
        """Bytes of unit data one worker of this step may hold at once (budget.py); None where
        zarrmill did not start the workers (``address``)."""
        kind = self._kind(workers)
        if kind == "address":
            return None
        if kind in BATCH_KINDS:
            return batch_unit_budget(self.spec, resources)
        return budget_of(self._local_worker_memory(kind))

    def budget_setting(self) -> str:
        """The setting that sizes a worker, for messages."""
        if self.spec.kind in BATCH_KINDS:
            return f"executor.{self.spec.kind}.memory, or a step's resources.memory"
        return "run on a machine with more memory" if _runs(self.spec.kind) == "inline" else "executor.memory_limit"

    def _local_workers(self, kind: str) -> int:
        return self.spec.workers or (1 if POOL_KINDS[kind].one_worker else available_cpus())

    def _local_worker_memory(self, kind: str) -> int:
        """A local worker's memory limit in bytes, as LocalCluster is given it."""
        local, limit = POOL_KINDS[kind], self.spec.memory_limit
        if limit and limit != "auto" and local.runs != "inline":
            from dask.utils import parse_bytes  # dask only where a pool is made: runs in this process skip its import

            return parse_bytes(limit)
        if local.shares_memory:  # the threads share this process's memory
            return int(available_memory() * 0.8)
        return int(available_memory() * 0.8 / self._local_workers(kind))

    def _start(self, resources: Resources | None, kind: str) -> tuple[Any, Any]:
        from distributed import Client, LocalCluster

        quiet_dask_logs()
        if kind == "address":
            if not self.spec.address:
                raise ExecutorError("executor.kind is 'address' but executor.address is not set")
            return None, Client(self.spec.address, set_as_default=False)
        if kind in BATCH_KINDS:
            made = self._made_run_dir or not self.run_dir.exists()
            make_run_dir(self.run_dir)
            self._made_run_dir = made
            try:
                cluster, client, keeper = start_pool(self.spec, self.name, self.run_dir, resources, self._credentials)
            except ConfigError:  # the scheduler refused the settings: a rejected run leaves no run folder
                if made and not self._pools:
                    self._remove_run_dir()
                raise
            self._keepers[id(client)] = keeper
            host = str(getattr(cluster, "scheduler_spec", {}).get("options", {}).get("dashboard_address", "")).rpartition(":")[0]
            if host:
                DASHBOARD_HOSTS[client] = host
            self.job_names.add(cluster.job_name)
            return cluster, client
        cpus = available_cpus()  # affinity, cgroup quota and the batch allocation, not the whole node
        local = POOL_KINDS[kind]
        workers = self._local_workers(kind)
        threads = cpus if local.all_threads else self.spec.threads_per_worker
        memory = self._local_worker_memory(kind)
        if local.processes:
            make_run_dir(self.run_dir)
        import dask.config

        with dask.config.set({UNSET_TRIM: None}):
            # the dashboard (and the scheduler) listen on this machine only
            # threads: the scheduler talks inproc, but each in-process worker still serves HTTP
            # (metrics), which listened on every interface unless told otherwise
            cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, memory_limit=memory,
                                   processes=local.processes, dashboard_address=f"{LOOPBACK}:0",
                                   worker_dashboard_address=f"{LOOPBACK}:0",
                                   **({"host": LOOPBACK} if local.processes else {}),
                                   silence_logs=_worker_log_level(),
                                   resources={MEMORY: budget_of(memory)},
                                   local_directory=str(self.run_dir / "dask") if local.processes else None)
        client = Client(cluster, set_as_default=False)
        DASHBOARD_HOSTS[client] = LOOPBACK
        return cluster, client

    def explain_lost_workers(self) -> str:
        """Why workers of this run died: dask restarted them over their memory limit, or the batch
        scheduler ended their jobs (memory, walltime, node); "" if nobody knows."""
        # the scheduler can notice the lost worker before the nanny's event or the job's state arrive
        batch = self.spec.kind in BATCH_KINDS and bool(self.job_names)
        deadline = time.monotonic() + (15 if batch else 3)
        while True:
            why = self._memory_restarts() or ("; ".join(scheduler(self.spec.kind).ended_jobs(
                self.job_names, since=self.started)) if batch else "")
            if why or time.monotonic() > deadline:
                return why
            time.sleep(0.5)

    def _memory_restarts(self) -> str:
        """The nanny's "worker-restart-memory" events: a worker grew past 95 % of its memory limit
        and was restarted (distributed records them on the scheduler)."""
        with self._lock:
            pools = list(self._pools.values())
        for _, client in pools:
            try:
                events = client.get_events("worker-restart-memory")
            except Exception:  # the scheduler may be gone already; then there is nothing to add
                continue
            if events:
                rss = max(int(e.get("rss", 0)) for _, e in events)
                setting = (f"executor.{self.spec.kind}.memory (or a step's resources.memory)"
                           if self.spec.kind in BATCH_KINDS else "executor.memory_limit, or use fewer executor.workers")
                return (f"{len(events)} worker(s) ran out of memory ({rss / 2**30:.1f} GiB used) and were "
                        f"restarted by dask: raise {setting}, or make units smaller")
        return ""

    def keep_pool(self, client: Any) -> None:
        """While a step waits for units on ``client``: its batch pool replaces ended jobs, or the
        run ends with why new ones cannot start (pool_keeper.py). Nothing for other clients."""
        keeper = self._keepers.get(id(client))
        if keeper is not None:
            keeper.check()

    def _remove_run_dir(self) -> None:
        from ...io.storage.paths import remove_bookkeeping

        try:
            remove_bookkeeping(self.run_dir)
        except OSError as err:  # noqa: PERF203 - a folder left is no failure of the run
            logging.getLogger("zarrmill").warning("could not remove the run folder %s: %s", self.run_dir, err)

    def _remove_run_keys(self) -> None:
        """The TLS key and certificate the run's workers read: useless once its schedulers are
        gone, and a key lying in a shared home for weeks is one more to leak."""
        for path in remove_run_credentials(self._credentials):
            logging.getLogger("zarrmill").warning("could not remove %s", path)

    def dashboard_links(self) -> list[str]:
        return [c.dashboard_link for _, c in self._pools.values() if c is not None]

    def close(self) -> None:
        # clients never become dask's global default (set_as_default=False), so closing several
        # pools cannot leave dask pointing at a closed scheduler for the user's own dask code
        try:
            for cluster, client in reversed(list(self._pools.values())):
                client.close()
                if cluster is not None:
                    cluster.close()
        finally:
            self._pools.clear()
            self._keepers.clear()
            self._remove_run_keys()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _runs(kind: str) -> str:
    """Where a kind's units run (local_kinds.py); "cluster" for a batch scheduler or an address."""
    local = pool_kind(kind)
    return local.runs if local is not None else "cluster"


FAILURE_LOGGERS = ("distributed.worker", "distributed.scheduler", "distributed.client")


def _worker_log_level() -> int:
    """Local worker processes: their "Compute Failed" tracebacks go to the step's error log."""
    return logging.DEBUG if logging.getLogger().getEffectiveLevel() <= logging.DEBUG else logging.CRITICAL


def quiet_dask_logs() -> None:
    """dask's logging config gives sub-loggers (distributed.scheduler, ...) their own INFO level;
    outside --debug only their errors belong on a user's terminal."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "dask_jobqueue"):
            logging.getLogger(name).setLevel(logging.ERROR)
    # a failed unit is reported once by the engine (one line, traceback in the step's error log)
    for name in FAILURE_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
