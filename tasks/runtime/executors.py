"""Executors only build dask Clients; the engine is the same on all of them.

``Executor.client_for(resources)`` returns the client a step runs on (None for ``sync``: inline).
On SLURM each distinct set of step resources gets its own SLURMCluster (a worker pool)."""
from __future__ import annotations

import logging
import shlex
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dask.config
from dask.utils import parse_bytes

from ..errors import ExecutorError
from .slurm import (
    SlurmCommandError,
    ended_jobs,
    job_script_value,
    job_state,
    run_slurm,
    sanitize_job_name,
    shell_safe_path,
    tail_file,
)
from .budget import MEMORY, budget_of
from .machine import available_cpus, available_memory
from .rundirs import make_run_dir
from .spec import ExecutorSpec, Resources

SLURM_DEFAULTS = {"cores": 1, "memory": "4GB", "walltime": "01:00:00", "processes": 1}
# dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in workers, which turns off glibc's dynamic mmap
# threshold: every large array/codec buffer is then mmapped and page-faulted afresh. Units here
# allocate tens of MB each; unsetting it made a rechunk on 2 workers 1.7x faster (2.82 -> 1.62 s).
UNSET_TRIM = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
UNSET_TRIM_ENV = "export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_=None"


LOOPBACK = "127.0.0.1"
# the host each pool's dashboard listens on, where zarrmill chose it (dask's own link names the
# scheduler's network address, where a dashboard bound to 127.0.0.1 does not answer)
DASHBOARD_HOSTS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


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
        self.job_names: set[str] = set()  # SLURM worker job names, to say why a job ended
        self.started = time.time() - 1  # SubmitTime has whole seconds
        self._lock = threading.Lock()  # for_each runs datasets in threads sharing this executor

    def client_for(self, resources: Resources | None, workers: str = "processes") -> Any:
        """``workers``: what the task runs best on. On the ``local`` executor a task whose units
        spend their time in GIL-free codecs ("threads": ingest, pyramid, reshard, ...) runs on
        threads in this process (no process start-up, no transfers); the others on processes.
        Explicit ``threads``/``slurm``/``address`` executors are used as configured."""
        kind = self._kind(workers)
        if kind == "sync":
            return None
        key = resources.key() if (kind == "slurm" and resources) else (kind,)
        with self._lock:
            if key not in self._pools:
                self._pools[key] = self._start(resources, kind)
            return self._pools[key][1]

    def _kind(self, workers: str) -> str:
        kind = self.spec.kind
        if kind == "local" and workers == "threads" and not (self.spec.workers or self.spec.memory_limit):
            kind = "threads"  # workers or memory_limit set: the user sized processes, keep them
        return kind

    def unit_budget(self, resources: Resources | None, workers: str = "processes") -> int | None:
        """Bytes of unit data one worker of this step may hold at once (budget.py); None where
        zarrmill did not start the workers (``address``)."""
        kind = self._kind(workers)
        if kind == "address":
            return None
        if kind == "slurm":
            return slurm_unit_budget(_slurm_settings(self.spec, resources))
        return budget_of(self._local_worker_memory(kind))

    def budget_setting(self) -> str:
        """The setting that sizes a worker, for messages."""
        return {"slurm": "executor.slurm.memory, or a step's resources.memory",
                "sync": "run on a machine with more memory"}.get(self.spec.kind, "executor.memory_limit")

    def _local_workers(self, kind: str) -> int:
        return self.spec.workers or (1 if kind in ("threads", "sync") else available_cpus())

    def _local_worker_memory(self, kind: str) -> int:
        """A local worker's memory limit in bytes, as LocalCluster is given it."""
        limit = self.spec.memory_limit
        if limit and limit != "auto" and kind != "sync":
            return parse_bytes(limit)
        return int(available_memory() * 0.8 / self._local_workers(kind))

    def _start(self, resources: Resources | None, kind: str) -> tuple[Any, Any]:
        from distributed import Client, LocalCluster

        quiet_dask_logs()
        if kind == "address":
            if not self.spec.address:
                raise ExecutorError("executor.kind is 'address' but executor.address is not set")
            return None, Client(self.spec.address, set_as_default=False)
        if kind == "slurm":
            make_run_dir(self.run_dir)
            cluster, client = start_slurm_pool(self.spec, self.name, self.run_dir, resources)
            host = str(getattr(cluster, "scheduler_spec", {}).get("options", {}).get("dashboard_address", "")).rpartition(":")[0]
            if host:
                DASHBOARD_HOSTS[client] = host
            self.job_names.add(cluster.job_name)
            return cluster, client
        cpus = available_cpus()  # affinity, cgroup quota and SLURM allocation, not the whole node
        workers = self._local_workers(kind)
        threads = cpus if kind == "threads" else self.spec.threads_per_worker
        memory = self._local_worker_memory(kind)
        if kind == "local":
            make_run_dir(self.run_dir)
        with dask.config.set({UNSET_TRIM: None}):
            # the dashboard (and the scheduler) listen on this machine only
            # threads: the scheduler talks inproc, but each in-process worker still serves HTTP
            # (metrics), which listened on every interface unless told otherwise
            cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, memory_limit=memory,
                                   processes=kind == "local", dashboard_address=f"{LOOPBACK}:0",
                                   worker_dashboard_address=f"{LOOPBACK}:0",
                                   **({"host": LOOPBACK} if kind == "local" else {}),
                                   silence_logs=_worker_log_level(),
                                   resources={MEMORY: budget_of(memory)},
                                   local_directory=str(self.run_dir / "dask") if kind == "local" else None)
        client = Client(cluster, set_as_default=False)
        DASHBOARD_HOSTS[client] = LOOPBACK
        return cluster, client

    def explain_lost_workers(self) -> str:
        """Why workers of this run died: dask restarted them over their memory limit, or SLURM
        ended their jobs (memory, walltime, node); "" if nobody knows."""
        # the scheduler can notice the lost worker before the nanny's event or SLURM's job state arrive
        slurm = self.spec.kind == "slurm" and bool(self.job_names)
        deadline = time.monotonic() + (15 if slurm else 3)
        while True:
            why = self._memory_restarts() or ("; ".join(ended_jobs(self.job_names, since=self.started))
                                              if slurm else "")
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
                setting = ("executor.slurm.memory (or a step's resources.memory)" if self.spec.kind == "slurm"
                           else "executor.memory_limit, or use fewer executor.workers")
                return (f"{len(events)} worker(s) ran out of memory ({rss / 2**30:.1f} GiB used) and were "
                        f"restarted by dask: raise {setting}, or make units smaller")
        return ""

    def dashboard_links(self) -> list[str]:
        return [c.dashboard_link for _, c in self._pools.values() if c is not None]

    def close(self) -> None:
        # clients never become dask's global default (set_as_default=False), so closing several
        # pools cannot leave dask pointing at a closed scheduler for the user's own dask code
        for cluster, client in reversed(list(self._pools.values())):
            client.close()
            if cluster is not None:
                cluster.close()
        self._pools.clear()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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


def _slurm_settings(spec: ExecutorSpec, resources: Resources | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for key, value in SLURM_DEFAULTS.items():
        if dask.config.get(f"jobqueue.slurm.{key}", None) is None:
            kwargs[key] = value
    kwargs.update(spec.slurm)
    if resources is not None:
        kwargs.update({k: v for k, v in resources.model_dump().items() if v is not None})
    return kwargs


def slurm_unit_budget(settings: dict[str, Any]) -> int:
    """A SLURM worker's unit budget: the job's memory over its worker processes (dask-jobqueue gives
    each that memory limit)."""
    memory = settings.get("memory") or _jobqueue("memory")
    processes = int(settings.get("processes") or _jobqueue("processes") or 1)
    return budget_of(parse_bytes(str(memory)) // max(processes, 1))


def with_memory_resource(args: list[str], budget: int) -> list[str]:
    """The worker's command-line arguments offering ``budget``, kept beside resources the user
    declared (``--resources "GPU=1"``); a ``MEMORY`` the user set wins."""
    if "--resources" not in args:
        return args + ["--resources", f"{MEMORY}={budget}"]
    i = args.index("--resources") + 1
    if i < len(args) and f"{MEMORY}=" not in args[i]:
        args[i] = f"{args[i]} {MEMORY}={budget}"
    return args


def slurm_cluster_kwargs(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None
                         ) -> dict[str, Any]:
    """Layering: dask-jobqueue's config (jobqueue.yaml, env) < workflow executor.slurm (already
    containing --set overrides) < step resources. Our defaults only fill what none of them sets."""
    kwargs = _slurm_settings(spec, resources)
    # each worker offers its unit budget (runtime/budget.py) as a dask resource
    budget = slurm_unit_budget(kwargs)
    extra = list(kwargs.get("worker_extra_args") or _jobqueue("worker-extra-args") or [])
    kwargs["worker_extra_args"] = with_memory_resource(extra, budget)
    log_dir = Path(kwargs.get("log_directory") or dask.config.get("jobqueue.slurm.log-directory", None)
                   or run_dir / "logs")
    kwargs["log_directory"] = str(log_dir)
    kwargs["job_name"] = sanitize_job_name(kwargs.get("job_name") or f"zm-{name}")
    # A user's own tasks.py (or any module) in the submit folder must never shadow the package.
    prologue = list(kwargs.get("job_script_prologue")
                    or dask.config.get("jobqueue.slurm.job-script-prologue", None) or [])
    kwargs["job_script_prologue"] = ["export PYTHONSAFEPATH=1", UNSET_TRIM_ENV,
                                     f"cd {shlex.quote(str(run_dir))}"] + prologue
    # zarrmill's defaults fill only what neither the workflow nor the user's jobqueue config sets
    if _jobqueue("python") is None:
        kwargs.setdefault("python", sys.executable)
    if _jobqueue("local-directory") is None:
        kwargs.setdefault("local_directory", str(run_dir / "dask"))
    # the user's scheduler-options stay; several pools (per-step resources) each run a scheduler,
    # so each dashboard picks a free port, on this host only unless the user says otherwise
    kwargs["scheduler_options"] = {"dashboard_address": "127.0.0.1:0", **(_jobqueue("scheduler-options") or {}),
                                   **kwargs.get("scheduler_options", {})}
    if "security" not in kwargs and _jobqueue("security") is None:
        # TLS between scheduler, workers and client with credentials made for this run: the
        # scheduler listens on the cluster network, where anyone could otherwise submit code to
        # the workers. The workers' key is written (mode 0600) into the run folder they share.
        from distributed.security import Security

        kwargs["security"] = Security.temporary()
        kwargs.setdefault("shared_temp_directory", str(run_dir))
    shell_safe_path("executor.run_dir", run_dir)
    for key in ("log_directory", "local_directory", "shared_temp_directory", "python"):
        shell_safe_path(f"executor.slurm.{key}", kwargs.get(key) or _jobqueue(key.replace("_", "-")))
    for key, value in kwargs.items():
        if key not in ("job_script_prologue", "security", "scheduler_options"):  # shell the user wrote on purpose; objects
            job_script_value(f"executor.slurm.{key}", value)
    return kwargs


def render_job_script(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None) -> str:
    """The worker job script a run would submit, without starting a scheduler or writing anything:
    TLS files and the scheduler address appear as placeholders (they exist once the run starts)."""
    import inspect

    from dask_jobqueue.core import Job
    from dask_jobqueue.slurm import SLURMJob

    kwargs = slurm_cluster_kwargs(spec, name, run_dir, resources)
    security, protocol = kwargs.pop("security", None), "tcp://"
    if security is not None:
        from distributed.security import Security

        def placeholder(kind: str) -> str:
            return str(run_dir / f".dask-jobqueue.worker.{kind}.RANDOM")

        security = Security(tls_ca_file=placeholder("ca_file"), tls_worker_cert=placeholder("cert"),
                            tls_worker_key=placeholder("key"))
        protocol = "tls://"
    accepted = set(inspect.signature(SLURMJob.__init__).parameters) | set(inspect.signature(Job.__init__).parameters)
    job_kwargs = {k: v for k, v in kwargs.items() if k in accepted and k not in ("name", "scheduler")}
    real_logs = job_kwargs.pop("log_directory")
    with tempfile.TemporaryDirectory() as stand_in:  # dask-jobqueue creates the log folder it is given
        job = SLURMJob(scheduler=f"{protocol}DRIVER-HOST:PORT", name=kwargs["job_name"], security=security,
                       protocol=protocol, log_directory=stand_in, **job_kwargs)
        return job.job_script().replace(stand_in, str(real_logs))


def _jobqueue(key: str) -> Any:
    return dask.config.get(f"jobqueue.slurm.{key}", None)


def check_job_script(script: str) -> None:
    """``sbatch --test-only`` on the worker job script: SLURM judges partition, memory, time and
    account at once and says what is wrong, instead of the run waiting for workers that never come."""
    try:
        run_slurm(["sbatch", "--test-only"], input=script)
    except SlurmCommandError as err:
        detail = "; ".join(line.strip() for line in str(err).split(": ", 1)[-1].splitlines() if line.strip())
        raise ExecutorError(f"SLURM rejects the worker jobs: {detail} (check executor.slurm: queue, memory, "
                            "walltime, account)") from None


def start_slurm_pool(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None
                     ) -> tuple[Any, Any]:
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    kwargs = slurm_cluster_kwargs(spec, name, run_dir, resources)
    Path(kwargs["log_directory"]).mkdir(parents=True, exist_ok=True)
    try:
        cluster = SLURMCluster(**kwargs)
    except (TypeError, ValueError) as err:
        raise ExecutorError(f"executor.slurm: SLURMCluster rejected the settings: {err}") from err
    try:
        check_job_script(cluster.job_script())
    except BaseException:
        cluster.close()
        raise
    client = Client(cluster, set_as_default=False)
    if spec.adapt is not None:
        cluster.adapt(minimum_jobs=spec.adapt.minimum_jobs, maximum_jobs=spec.adapt.maximum_jobs)
        wanted = min(1, spec.adapt.minimum_jobs)
    else:
        cluster.scale(jobs=spec.jobs or 1)
        wanted = 1
    if wanted:
        try:
            wait_for_slurm_workers(cluster, client, spec.worker_start_timeout, Path(kwargs["log_directory"]))
        except BaseException:
            client.close()
            cluster.close()
            raise
    return cluster, client


def wait_for_slurm_workers(cluster: Any, client: Any, timeout: float, log_dir: Path) -> None:
    """Wait for one worker; if the jobs die or the time runs out, say why (state + .err log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.scheduler_info(n_workers=-1)["workers"]:
            return
        jobs = _job_ids(cluster)
        if jobs and all(job_state(j)[0] in {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                             "OUT_OF_MEMORY", "BOOT_FAIL", "COMPLETED"} for j in jobs):
            break
        time.sleep(1.0)
    raise ExecutorError(_worker_start_report(cluster, log_dir, timeout))


def _job_ids(cluster: Any) -> list[str]:
    return [str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)]


def _worker_start_report(cluster: Any, log_dir: Path, timeout: float) -> str:
    parts = []
    for job_id in _job_ids(cluster):
        state, code = job_state(job_id)
        err_files = sorted(log_dir.glob(f"*-{job_id}.err"))
        err = tail_file(err_files[0]) if err_files else "(no .err log yet)"
        parts.append(f"job {job_id} {state} exit {code or '?'}; {err_files[0] if err_files else log_dir}: {err}")
    detail = "; ".join(parts) or "no job was submitted"
    return f"no SLURM worker connected within {timeout:.0f}s: {detail}"
