"""Worker pools on batch schedulers through dask-jobqueue, the same way on every scheduler
(schedulers/: what differs). Settings are layered: dask-jobqueue's own config (jobqueue.yaml,
environment) < the workflow's ``executor.<kind>`` block (with --set overrides) < a step's
``resources``; zarrmill's defaults fill only what none of them sets. Every pool's workers get a
unit budget, TLS credentials made for the run, a job script whose values are one plain line each,
and the scheduler's own check before the run waits for a worker."""
from __future__ import annotations

import inspect
import os
import shlex
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...errors import ConfigError, ExecutorError
from ..core.budget import MEMORY, budget_of
from .pool_keeper import PoolKeeper
from .run_credentials import RUN_CREDENTIALS, placeholder_credentials, write_run_credentials
from .schedulers import scheduler
from .schedulers.base import Scheduler, checked_script, jobqueue_module, job_script_value, sanitize_job_name, shell_safe_path, tail_file
from .spec import ExecutorSpec, Resources

# dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in workers, which turns off glibc's dynamic mmap
# threshold: every large array/codec buffer is then mmapped and page-faulted afresh. Units here
# allocate tens of MB each; unsetting it made a rechunk on 2 workers 1.7x faster (2.82 -> 1.62 s).
UNSET_TRIM = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
UNSET_TRIM_ENV = "export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_=None"


def _jobqueue(batch: Scheduler, key: str) -> Any:
    # dask is imported where a pool is made, not with this module: a run in this process (threads)
    # never needs it, and importing it cost every run's start 0.1-0.15 s
    import dask.config

    return dask.config.get(f"jobqueue.{batch.kind}.{key}", None)


@lru_cache(maxsize=1)
def _packaged_defaults() -> dict[str, Any]:
    """dask-jobqueue's own jobqueue.yaml, which it adds to dask's config when imported."""
    from importlib.resources import files

    import yaml

    return (yaml.safe_load(files("dask_jobqueue").joinpath("jobqueue.yaml").read_text()) or {}).get("jobqueue", {})


def _users_choice(batch: Scheduler, key: str) -> Any:
    """The user's jobqueue config for ``key`` (jobqueue.yaml, DASK_JOBQUEUE__* variables), None where
    it only holds dask-jobqueue's packaged default (its 30-minute walltime would otherwise stand
    in for zarrmill's hour)."""
    value = _jobqueue(batch, key)
    return None if value == _packaged_defaults().get(batch.kind, {}).get(key) else value


def _settings(spec: ExecutorSpec, resources: Resources | None) -> dict[str, Any]:
    batch = scheduler(spec.kind)
    kwargs: dict[str, Any] = {}
    for key, value in batch.defaults.items():
        chosen = _users_choice(batch, key)
        if chosen is None:
            kwargs[key] = value
        elif key == "walltime":  # made the scheduler's own form below, as the workflow's is
            kwargs[key] = chosen
    kwargs.update(batch.settings(kwargs))
    kwargs.update(batch.settings(spec.batch_settings()))
    if resources is not None:
        kwargs.update(batch.settings({k: v for k, v in resources.model_dump().items() if v is not None}))
    return kwargs


def _bytes(batch: Scheduler, value: Any) -> int:
    """A job's memory in bytes; a value no check caught (WorkflowSpec checks them) is one line, exit 2."""
    from dask.utils import parse_bytes

    try:
        return parse_bytes(str(value))
    except (ValueError, TypeError):
        raise ConfigError(f"executor.{batch.kind}.memory: {value!r} is not a size; write e.g. 4GB or 512MiB") from None


def _count(batch: Scheduler, key: str, value: Any) -> int:
    try:
        return int(value)
    except (ValueError, TypeError):
        raise ConfigError(f"executor.{batch.kind}.{key}: {value!r} is not a whole number; write e.g. 4") from None


def batch_unit_budget(spec: ExecutorSpec, resources: Resources | None) -> int:
    """A batch worker's unit budget: the job's memory over its worker processes (dask-jobqueue gives
    each that memory limit)."""
    batch, settings = scheduler(spec.kind), _settings(spec, resources)
    memory = settings.get("memory") or _jobqueue(batch, "memory")
    processes = _count(batch, "processes", settings.get("processes") or _jobqueue(batch, "processes") or 1)
    return budget_of(_bytes(batch, memory) // max(processes, 1))


def _effective(spec: ExecutorSpec, resources: Resources | None) -> tuple[int, int, int, float]:
    """(cores, processes, memory bytes, walltime seconds) a pool of these resources runs with:
    the layered settings, else dask-jobqueue's own config for this scheduler."""
    batch, have = scheduler(spec.kind), _settings(spec, resources)

    def value(key: str, default: Any) -> Any:
        found = have.get(key)
        return found if found is not None else (_jobqueue(batch, key) if _jobqueue(batch, key) is not None else default)

    return (_count(batch, "cores", value("cores", 1)), _count(batch, "processes", value("processes", 1)),
            _bytes(batch, value("memory", "0")), batch.walltime_seconds(value("walltime", "inf")))


def fitting_pool(spec: ExecutorSpec, need: Resources | None, pools: dict[tuple, tuple[Resources | None, float]]
                 ) -> tuple | None:
    """A running pool whose worker jobs hold what ``need`` asks: as many cores, the same number of
    worker processes, as much memory, and at least its run time still left (a pool's walltime
    counts from its start). The smallest such pool; None when there is none."""
    cores, processes, memory, walltime = _effective(spec, need)
    fits = []
    for key, (resources, started) in pools.items():
        have_cores, have_processes, have_memory, have_walltime = _effective(spec, resources)
        if (have_cores >= cores and have_processes == processes and have_memory >= memory
                and have_walltime - (time.time() - started) >= walltime):
            fits.append((have_memory, have_cores, key))
    return min(fits)[2] if fits else None


def with_memory_resource(args: list[str], budget: int) -> list[str]:
    """The worker's command-line arguments offering ``budget``, kept beside resources the user
    declared (``--resources "GPU=1"``); a ``MEMORY`` the user set wins."""
    if "--resources" not in args:
        return args + ["--resources", f"{MEMORY}={budget}"]
    i = args.index("--resources") + 1
    if i < len(args) and f"{MEMORY}=" not in args[i]:
        args[i] = f"{args[i]} {MEMORY}={budget}"
    return args


def lifetime_of(walltime: float) -> tuple[int, int] | None:
    """(lifetime, stagger) in seconds of a worker whose job may run ``walltime`` seconds: it stops
    taking units and leaves (its units move to other workers, its job ends, the pool submits
    another) a margin before the scheduler would kill it mid-unit. The margin is a tenth of the
    walltime, at least 10 s and at most 10 minutes; stagger (dask adds up to +/- it) is half the
    margin, so workers of one pool do not all leave at one instant. None without a walltime."""
    if walltime == float("inf") or walltime <= 0:
        return None
    margin = min(max(walltime / 10, 10.0), 600.0)
    if walltime <= 2 * margin:
        return None  # too short to leave before it ends: the scheduler's end is the only one
    return int(walltime - margin), int(margin / 2)


def with_lifetime(args: list[str], walltime: float) -> list[str]:
    """The worker's arguments with ``--lifetime`` from the walltime (lifetime_of), unless the user
    set one (worker_extra_args)."""
    times = lifetime_of(walltime)
    if times is None or any(a == "--lifetime" or a.startswith("--lifetime=") for a in args):
        return args
    return args + ["--lifetime", f"{times[0]}s", "--lifetime-stagger", f"{times[1]}s"]


def cluster_kwargs(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None) -> dict[str, Any]:
    """The keywords of this executor's dask-jobqueue cluster (module doc: how they are layered)."""
    batch = scheduler(spec.kind)
    kwargs = _settings(spec, resources)
    kwargs["worker_extra_args"] = with_lifetime(with_memory_resource(
        list(kwargs.get("worker_extra_args") or _jobqueue(batch, "worker-extra-args") or []),
        batch_unit_budget(spec, resources)), _effective(spec, resources)[3])
    kwargs["log_directory"] = str(Path(kwargs.get("log_directory") or _jobqueue(batch, "log-directory")
                                       or run_dir / "logs"))
    # the user's jobqueue.yaml ``name`` (dask-jobqueue's packaged "dask-worker" is not a choice)
    kwargs["job_name"] = sanitize_job_name(kwargs.get("job_name") or _users_choice(batch, "name") or f"zm-{name}")
    # Workers start in the folder zarrmill was started from (a shared folder on a cluster), so a
    # relative path in a workflow names the same file on a node as on the driver; a user's own
    # tasks.py (or any module) there never shadows the package (PYTHONSAFEPATH: the current
    # folder is not on sys.path).
    prologue = list(kwargs.get("job_script_prologue") or _jobqueue(batch, "job-script-prologue") or [])
    kwargs["job_script_prologue"] = ["export PYTHONSAFEPATH=1", UNSET_TRIM_ENV,
                                     f"cd {shlex.quote(os.getcwd())}"] + prologue
    if _jobqueue(batch, "python") is None:
        kwargs.setdefault("python", sys.executable)
    if _jobqueue(batch, "local-directory") is None:
        kwargs.setdefault("local_directory", str(run_dir / "dask"))
    # the user's scheduler-options stay; several pools (per-step resources) each run a scheduler,
    # so each dashboard picks a free port, on this host only unless the user says otherwise
    kwargs["scheduler_options"] = {"dashboard_address": "127.0.0.1:0", **(_jobqueue(batch, "scheduler-options") or {}),
                                   **kwargs.get("scheduler_options", {})}
    if "security" not in kwargs and _jobqueue(batch, "security") is None:
        # TLS with credentials made for this run, written into its run folder when the pool starts
        kwargs["security"] = RUN_CREDENTIALS
    shell_safe_path("executor.run_dir", run_dir)
    for key in ("log_directory", "local_directory", "shared_temp_directory", "python"):
        shell_safe_path(f"executor.{batch.kind}.{key}", kwargs.get(key) or _jobqueue(batch, key.replace("_", "-")))
    for key, value in kwargs.items():
        if key not in ("job_script_prologue", "security", "scheduler_options"):  # shell the user wrote on purpose; objects
            job_script_value(f"executor.{batch.kind}.{key}", value)
    return kwargs


def render_job_script(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None) -> str:
    """The worker job script a run would submit, without starting a scheduler or writing anything:
    TLS files and the scheduler address appear as placeholders (they exist once the run starts)."""
    Job = jobqueue_module("dask_jobqueue.core").Job
    batch = scheduler(spec.kind)
    kwargs = cluster_kwargs(spec, name, run_dir, resources)
    security, protocol = kwargs.pop("security", None), "tcp://"
    if security is not None:
        security = placeholder_credentials(run_dir) if security == RUN_CREDENTIALS else security
        protocol = "tls://"
    job_cls = batch.job()
    accepted = set(inspect.signature(job_cls.__init__).parameters) | set(inspect.signature(Job.__init__).parameters)
    job_kwargs = {k: v for k, v in kwargs.items() if k in accepted and k not in ("name", "scheduler")}
    real_logs = job_kwargs.pop("log_directory")
    with tempfile.TemporaryDirectory() as stand_in:  # dask-jobqueue creates the log folder it is given
        job = job_cls(scheduler=f"{protocol}DRIVER-HOST:PORT", name=kwargs["job_name"], security=security,
                      protocol=protocol, log_directory=stand_in, **job_kwargs)
        return checked_script(job.job_script().replace(stand_in, str(real_logs)), worker_script_source(batch))


def worker_script_source(batch: Scheduler) -> str:
    """Where a worker job script's values come from, named in a refusal."""
    return (f"the {batch.label} worker job script (executor.{batch.kind} settings, job_script_prologue "
            f"or dask-jobqueue's jobqueue.{batch.kind} config)")


def start_pool(spec: ExecutorSpec, name: str, run_dir: Path, resources: Resources | None,
               credentials: list[Path]) -> tuple[Any, Any, PoolKeeper]:
    """A dask-jobqueue cluster for these resources, its client and the keeper that holds its size
    (pool_keeper.py); returns once a worker connected (a fixed pool or an adaptive one with a
    minimum), or raises with what the scheduler says. The TLS files it writes are appended to
    ``credentials`` (the executor removes them when the run ends)."""
    from distributed import Client

    batch = scheduler(spec.kind)
    kwargs = cluster_kwargs(spec, name, run_dir, resources)
    Path(kwargs["log_directory"]).mkdir(parents=True, exist_ok=True)
    if kwargs.get("security") == RUN_CREDENTIALS:
        kwargs["security"] = write_run_credentials(run_dir, credentials)
    try:
        cluster = batch.cluster()(**kwargs)
    except (TypeError, ValueError) as err:
        raise ExecutorError(f"executor.{batch.kind}: {batch.cluster_class} rejected the settings: {err}") from err
    try:
        batch.check_script(checked_script(cluster.job_script(), worker_script_source(batch)))
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
    keeper = PoolKeeper(batch, cluster, client, None if spec.adapt is not None else spec.jobs or 1,
                        Path(kwargs["log_directory"]), spec.worker_start_timeout)
    if wanted:
        try:
            wait_for_workers(keeper, spec.worker_start_timeout)
        except BaseException:
            client.close()
            cluster.close()
            raise
    return cluster, client, keeper


def wait_for_workers(keeper: PoolKeeper, timeout: float) -> None:
    """Wait for one worker; if the jobs die, wait for a reason that never clears, or the time runs
    out, say why (state, reason, .err log)."""
    batch, cluster, client = keeper.batch, keeper.cluster, keeper.client
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.scheduler_info(n_workers=-1)["workers"]:
            return
        jobs = _job_ids(cluster)
        states = keeper.queue_states(jobs, set()) if jobs else None
        if jobs and states is not None and all(states.get(j, ("", ""))[0] in batch.ended_states for j in jobs):
            break
        time.sleep(1.0)
    raise ExecutorError(_worker_start_report(batch, cluster, keeper.log_dir, timeout))


def _job_ids(cluster: Any) -> list[str]:
    return [str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)]


def _worker_start_report(batch: Scheduler, cluster: Any, log_dir: Path, timeout: float) -> str:
    parts = []
    for job_id in _job_ids(cluster):
        state, code = batch.job_state(job_id)
        err_files = sorted(log_dir.glob(f"*{job_id}*.err"))
        err = tail_file(err_files[0]) if err_files else "(no .err log yet)"
        parts.append(f"job {job_id} {state} exit {code or '?'}; {err_files[0] if err_files else log_dir}: {err}")
    detail = "; ".join(parts) or "no job was submitted"
    return f"no {batch.label} worker connected within {timeout:.0f}s: {detail}"
