"""The typed shape of a workflow file: executor block, per-step resources, steps."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from ...errors import did_you_mean
from .kinds import EXECUTOR_KINDS
from .schedulers import BATCH_KINDS, SCHEDULERS


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SettingError(ValueError):
    """A bad value inside a validated field (a key of ``executor.<kind>``, a step's resources): ``loc``
    continues the field's location, so the line names that key (workflow.validation_problems)."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = tuple(loc)


def a_size(value: str | None, allow_auto: bool = False) -> str | None:
    """A memory size dask and the schedulers understand (4GB, 512MiB), else one clear line."""
    from dask.utils import parse_bytes

    if value is None or (allow_auto and value == "auto"):
        return value
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        size = parse_bytes(value)
    except (ValueError, TypeError):
        raise ValueError(f"{value!r} is not a size; write e.g. 4GB or 512MiB{' or auto' if allow_auto else ''}") from None
    if size <= 0:
        raise ValueError(f"{value!r}: a worker needs more than 0 bytes")
    return value


def a_duration(value: Any) -> Any:
    """A time dask parses (``death_timeout``: 60, '60s', '5 minutes'), else one clear line."""
    from dask.utils import parse_timedelta

    try:
        if isinstance(value, bool):
            raise TypeError(value)
        seconds = parse_timedelta(value)
    except (ValueError, TypeError, KeyError):
        raise ValueError(f"{value!r} is not a time; write seconds or e.g. '60s' or '5 minutes'") from None
    if seconds is None or seconds <= 0:
        raise ValueError(f"{value!r}: give a time of more than 0 seconds, e.g. '60s'")
    return value


def a_count(value: Any, low: int = 1) -> Any:
    """A whole number of cores, processes, workers, else one clear line."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1_000_000:
        raise ValueError(f"{value!r} is not a whole number from {low} to 1000000; write e.g. 4")
    return value


def a_byte_count(value: Any) -> Any:
    """A ``mem`` setting in bytes as a number (dask-jobqueue turns it into the scheduler's unit), else one clear line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{value!r} is not a number of bytes; write e.g. 16000000000 (or set memory: 16GB)")
    return value


# the values dask-jobqueue parses, or puts into the job script where a scheduler would refuse them:
# checked when the workflow is validated, on every scheduler (a cluster class that lacks a key
# refuses it as an unknown setting before this)
BATCH_VALUE_CHECKS = {
    "memory": a_size, "job_mem": a_size, "disk": a_size, "mem": a_byte_count, "death_timeout": a_duration,
    "cores": a_count, "processes": a_count, "job_cpu": a_count, "ncpus": a_count,
    "n_workers": lambda v: a_count(v, 0),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def batch_setting_problem(kind: str, key: str, value: Any) -> str | None:
    """Why ``value`` of ``executor.<kind>.<key>`` would fail on the cluster (or in dask-jobqueue),
    naming the value and a good one; None if it is fine or not checked here. A value with a newline
    is left to job_script_value, which refuses it with its own words."""
    if value is None or isinstance(value, str) and _CONTROL.search(value):
        return None
    if key == "walltime":
        return SCHEDULERS[kind].walltime_problem(value)
    check = BATCH_VALUE_CHECKS.get(key)
    if check is None:
        return None
    try:
        check(value)
    except ValueError as err:
        return str(err)
    return None


class Resources(Strict):
    """What one worker of this step needs. On a batch scheduler each distinct set is its own pool of jobs."""

    cores: int | None = Field(None, ge=1, description="cores per worker job")
    memory: str | None = Field(None, description="memory per worker job, e.g. '8GB'")
    walltime: str | None = Field(None, description="batch schedulers: run-time limit of a worker job, e.g. "
                                 "'02:00:00' (quoted: YAML reads 02:00:00 unquoted as a number)")
    processes: int | None = Field(None, ge=1, description="dask worker processes per job")

    def key(self) -> tuple:
        return (self.cores, self.memory, self.walltime, self.processes)

    @field_validator("memory")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        return a_size(value)

    @field_validator("walltime", mode="before")
    @classmethod
    def _a_walltime(cls, value: Any) -> Any:
        """Any scheduler's form here; the executor's own is checked with the workflow (WorkflowSpec)."""
        from .schedulers.base import walltime_number_problem

        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(walltime_number_problem(value))
        if isinstance(value, str) and not _CONTROL.search(value) and not re.fullmatch(
                r"(\d+-)?\d+(:\d{1,2}){0,2}(\.\d+)?|UNLIMITED|INFINITE", value.strip()):
            raise ValueError(f"{value!r} is not a walltime; write HH:MM:SS, e.g. '02:00:00'")
        return value


class Adapt(Strict):
    minimum_jobs: int = Field(0, ge=0, le=10_000)
    maximum_jobs: int = Field(4, ge=1, le=10_000)


WORKERS_PER_CPU = 4  # local worker processes per available CPU (I/O-bound work may oversubscribe a little)
THREADS_PER_CPU = 16


def _batch_kinds_described() -> str:
    return ", ".join(kind if s.label.lower() == kind else f"{kind} ({s.label})" for kind, s in SCHEDULERS.items())


class _Executor(Strict):
    """Where the units run. Only builds a dask Client; the engine is the same everywhere. Each
    registered batch scheduler adds its settings block (``ExecutorSpec`` below)."""

    kind: Literal[EXECUTOR_KINDS] = Field(  # type: ignore[valid-type]
        "auto", description="auto: chosen per step by its plan (threads in this process for a plan that "
        "fits here, else as local); local: LocalCluster (processes); threads: one process, many threads; "
        f"sync: inline on the driver (debugging); {_batch_kinds_described()}: worker jobs "
        "through dask-jobqueue's cluster class of that scheduler; address: an existing scheduler")
    workers: int | None = Field(None, ge=1, le=1_000_000, description="local: worker processes (default: cores)")
    threads_per_worker: int = Field(1, ge=1, le=1_000_000)  # the machine check says 'at most N'
    memory_limit: str | None = Field(None, description="local: per worker (default: RAM / workers)")
    address: str | None = Field(None, description="address: scheduler address, e.g. tcp://host:8786")
    jobs: int | None = Field(None, ge=1, le=10_000, description="batch schedulers: fixed number of worker jobs per pool")
    adapt: Adapt | None = Field(None, description="batch schedulers: adaptive number of worker jobs")
    worker_start_timeout: float = Field(300.0, gt=0, le=86_400, description="seconds to wait for the first worker")
    reuse_workers: bool = Field(True, description="batch schedulers: a step whose resources a running pool's jobs "
                                "hold (cores, memory, walltime left) runs on those workers instead of queueing new jobs")
    idle_timeout: float = Field(300.0, ge=0, le=604_800, description="batch schedulers: a pool no step has used for "
                                "this many seconds is released (its jobs end) when the next step starts; 0: pools "
                                "last until the run ends")
    retries: int = Field(1, ge=0, le=100, description="times a failed unit is retried")
    run_dir: str | None = Field(None, description="worker cwd, batch job logs, TLS files (default: <runs root>/<name>-<time>; manual: HPC admin)")

    @field_validator("memory_limit")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        return a_size(value, allow_auto=True)

    @model_validator(mode="after")
    def _fits_this_machine(self) -> "ExecutorSpec":
        """Local workers are processes (threads) on this machine: a typo such as 100000 would start
        until memory runs out. The bound is stated in the message."""
        if self.kind in ("auto", "local", "threads"):
            from .machine import available_cpus

            cpus = available_cpus()
            if self.workers is not None and self.workers > WORKERS_PER_CPU * cpus:
                raise ValueError(f"workers: {self.workers} is more than {WORKERS_PER_CPU} per CPU this process may use "
                                 f"({cpus}); at most {WORKERS_PER_CPU * cpus} here")
            if self.threads_per_worker > THREADS_PER_CPU * cpus:
                raise ValueError(f"threads_per_worker: {self.threads_per_worker} is more than {THREADS_PER_CPU} per CPU "
                                 f"({cpus} CPUs); at most {THREADS_PER_CPU * cpus} here")
        return self

    @model_validator(mode="after")
    def _jobqueue_config(self) -> "ExecutorSpec":
        """dask-jobqueue's own config (jobqueue.yaml, DASK_JOBQUEUE__<KIND>__* variables) fills what the
        workflow leaves unset: a bad size or time there is said now too, naming where it comes from."""
        if self.kind not in BATCH_KINDS:
            return self
        import dask.config

        own = self.batch_settings()
        for key in ("walltime", *BATCH_VALUE_CHECKS):
            name = key.replace("_", "-")
            value = dask.config.get(f"jobqueue.{self.kind}.{name}", None)
            problem = None if key in own else batch_setting_problem(self.kind, key, value)
            if problem:
                variable = f"DASK_JOBQUEUE__{self.kind.upper()}__{name.upper().replace('-', '_')}"
                raise ValueError(f"jobqueue.{self.kind}.{name} of dask's config (jobqueue.yaml or {variable}): "
                                 f"{problem}; or set executor.{self.kind}.{key}")
        return self

    def batch_settings(self) -> dict[str, Any]:
        """The settings block of this executor's scheduler (executor.<kind>)."""
        return dict(getattr(self, self.kind, None) or {})


def _known_settings(cls: type, value: dict[str, Any], info: Any) -> dict[str, Any]:
    """Typos fail here, at validate time, not later on the cluster."""
    batch = SCHEDULERS[info.field_name]
    known = batch.parameters
    for key in value:
        if key not in known:
            hint = did_you_mean(key, known)
            hint = f"; {hint}" if hint else f"; known: {', '.join(sorted(known))}"
            raise SettingError((key,), f"{key!r} is not a {batch.cluster_class} setting{hint}")
    for key, setting in value.items():  # sizes and times: said now, not as a crash in dask-jobqueue later
        problem = batch_setting_problem(batch.kind, key, setting)
        if problem:
            raise SettingError((key,), problem)
    return value


# executor.<kind>: one settings block per registered scheduler, checked against its cluster class
ExecutorSpec = create_model(
    "ExecutorSpec", __base__=_Executor, __doc__=_Executor.__doc__,
    __validators__={"_known_settings": field_validator(*BATCH_KINDS)(_known_settings)},
    **{kind: (dict[str, Any], Field(default_factory=dict, description=s.settings_help))
       for kind, s in SCHEDULERS.items()})


class Ready(Strict):
    """When a dataset is complete enough to convert."""

    marker: str | None = Field(None, description="glob inside the dataset that must exist, e.g. MeasurementData.mlf")
    quiet_seconds: float = Field(0.0, ge=0, le=604_800, description="no file in the dataset changed for this long")


class ForEach(Strict):
    """Run the steps once per dataset; ${NAME.name}, ${NAME.path}, ${NAME.stem} in params."""

    glob: str | None = Field(None, description="datasets: paths matching this glob (e.g. /data/incoming/*)")
    list: str | None = Field(None, description="datasets: a file with one path per line")
    name: str = Field("dataset", description="variable name bound to each dataset")
    ready: Ready = Field(default_factory=Ready)
    max_concurrent: int = Field(2, ge=1, le=1024, description="datasets converted at once")
    state_dir: str | None = Field(None, description="run history and locks (default: .zarrmill-state next to the outputs)")
    lock_stale_seconds: float = Field(300.0, gt=0, le=604_800, description="a lock whose heartbeat is older is taken over")


class FollowSpec(Strict):
    """The first step (an ingest) converts an acquisition the instrument is still writing, a well
    as soon as it is complete (zarrmill follow; manual: Live conversion)."""

    poll_seconds: float = Field(5.0, ge=0.1, le=3600, description="seconds between looks at the acquisition")
    settle_seconds: float = Field(2.0, ge=0, le=86_400, description="a well unchanged this long, the instrument "
                                  "on another well, is converted")
    quiet_seconds: float = Field(1800.0, ge=0, le=604_800, description="nothing new this long: the acquisition "
                                 "is over (instruments that write no end marker)")


class StepSpec(Strict):
    task: str = Field(description="task name (zarrmill tasks)")
    params: dict[str, Any] = Field(default_factory=dict)
    needs: list[str] = Field(default_factory=list, description="steps that must finish first")
    resources: Resources | None = None


class StorageSpec(Strict):
    """Object-store settings that differ per store (never credentials: those stay where AWS tools
    keep them). Applied as the variables every S3 client reads, for the run and its workers."""
    endpoint: str | None = Field(None, description="S3 endpoint URL, e.g. https://s3.example.org")
    region: str | None = Field(None, max_length=64)
    profile: str | None = Field(None, max_length=256, description="a profile in ~/.aws/config")
    anonymous: bool = Field(False, description="unsigned requests (public buckets)")


class WorkflowSpec(Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    for_each: ForEach | None = Field(None, description="run the steps once per dataset found")
    storage: StorageSpec | None = Field(None, description="object-store endpoint, region, profile, anonymous")
    follow: FollowSpec | None = Field(None, description="the first step, an ingest, follows an acquisition still "
                                      "being written (zarrmill follow)")
    steps: dict[str, StepSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _walltimes_the_scheduler_takes(self) -> "WorkflowSpec":
        """A step's resources.walltime in the form the executor's scheduler takes (some take no days)."""
        if self.executor.kind in BATCH_KINDS:
            for name, step in self.steps.items():
                walltime = step.resources.walltime if step.resources else None
                problem = batch_setting_problem(self.executor.kind, "walltime", walltime)
                if problem:
                    raise SettingError(("steps", name, "resources", "walltime"), problem)
        return self
