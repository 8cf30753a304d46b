"""What every batch scheduler shares, and the small interface where they differ.

dask-jobqueue starts the workers on each scheduler (one cluster class per scheduler, laid out one
module each, as here); zarrmill adds what a user of a facility needs around it: the scheduler's
own check of a job before the run waits for it, the state a job ended in and why, and values
checked before they go into a job script. ``Scheduler`` is that interface; each other module of
this package fills it for one scheduler and registers it as ``SCHEDULER``."""
from __future__ import annotations

import importlib
import inspect
import logging
import re
import subprocess
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from ....errors import ConfigError, ExecutorError

log = logging.getLogger("zarrmill.scheduler")


class SchedulerCommandError(ExecutorError):
    pass


class Scheduler:
    """One batch scheduler. A module in this package that sets ``SCHEDULER`` to an instance is all it
    takes to add one: the command line, the workflow file's ``executor.<kind>`` block, submit and
    the worker pools read them from ``SCHEDULERS`` (schedulers/__init__.py)."""

    kind = ""  # executor.kind
    label = ""  # how users call it
    rank = 100  # its place in lists; the first is the default of zarrmill submit
    settings_help = ""  # what executor.<kind> holds (the workflow file's reference)
    # the variable the scheduler sets to the CPUs it granted a job (runtime/execution/machine.py)
    allocated_cpus_variable = ""
    cluster_class = ""  # the dask_jobqueue cluster class
    job_module, job_class = "", ""  # its job class, for job scripts without a cluster
    submit_command, cancel_command = "", ""
    # zarrmill's defaults, used where neither the workflow nor the user's jobqueue config says
    defaults: dict[str, Any] = {"cores": 1, "memory": "4GB", "walltime": "01:00:00", "processes": 1}
    # states of a job that will never start a worker
    ended_states: frozenset[str] = frozenset()
    # the run-time limits the scheduler takes (dask-jobqueue writes walltime into the job script as
    # given); None where walltime is not a setting (HTCondor)
    walltime_pattern: str | None = r"\d+(:\d{1,2}){0,2}"
    walltime_forms = "HH:MM:SS or seconds"

    def walltime_problem(self, value: object) -> str | None:
        """Why ``value`` is not a run-time limit this scheduler takes, with a good one; None if it is.
        A number is refused: YAML reads an unquoted 24:00:00 as the number 86400."""
        if self.walltime_pattern is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return walltime_number_problem(value)
        if isinstance(value, str) and re.fullmatch(self.walltime_pattern, value.strip()):
            return None
        return f"{value!r} is not a walltime {self.label} takes; write {self.walltime_forms}, e.g. '02:00:00'"

    def allocated_memory(self, env: Mapping[str, str]) -> int | None:
        """Bytes the scheduler granted the job this process runs in, where it says so."""
        return None

    def walltime_seconds(self, walltime: object) -> float:
        """A walltime in seconds: [D-]HH:MM:SS, MM:SS or minutes; inf if unknown."""
        text = str(walltime).strip()
        days, _, text = text.rpartition("-") if "-" in text else ("", "", text)
        try:
            parts = [float(v) for v in text.split(":")]
            extra = float(days or 0) * 86400
        except ValueError:
            return float("inf")
        if days and len(parts) < 3:  # D-HH, D-HH:MM
            return extra + parts[0] * 3600 + (parts[1] * 60 if len(parts) == 2 else 0)
        if len(parts) == 1:
            return extra + parts[0] * 60
        if len(parts) == 2:
            return extra + self._two_part_seconds(parts[0], parts[1])
        return extra + parts[0] * 3600 + parts[1] * 60 + parts[2]

    def _two_part_seconds(self, first: float, second: float) -> float:
        return first * 60 + second  # MM:SS

    def cluster(self) -> type:
        return getattr(jobqueue_module("dask_jobqueue"), self.cluster_class)

    def job(self) -> type:
        return getattr(jobqueue_module(self.job_module), self.job_class)

    @cached_property
    def parameters(self) -> frozenset[str]:
        """Every keyword the cluster class (and its job class) accepts."""
        core = jobqueue_module("dask_jobqueue.core")
        Job, JobQueueCluster = core.Job, core.JobQueueCluster
        names: set[str] = set()
        for cls in (self.cluster(), JobQueueCluster, self.job(), Job):
            names |= {p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")}
        return frozenset(names - {"scheduler", "name", "config_name"})

    def settings(self, resources: dict[str, Any]) -> dict[str, Any]:
        """A step's resources (cores, memory, walltime, processes) as this cluster's keywords."""
        return {k: v for k, v in resources.items() if k in self.parameters}

    def check_script(self, script: str, what: str = "the worker jobs", driver: bool = False) -> None:
        """Ask the scheduler whether it would run this job script (where it can tell without
        running it) and would ever start it (``queue_problems``); raise ConfigError (a setting the
        cluster rejects: exit 2) with its own words if not."""

    def job_state(self, job_id: str) -> tuple[str, str]:
        """(state, exit code) of a job, as far as the scheduler still knows it."""
        return "UNKNOWN", ""

    def job_states(self, job_ids: list[str]) -> dict[str, tuple[str, str]]:
        """{job id: (state, why it waits)} of jobs the scheduler still lists (pending, running, just
        ended); a job it no longer lists is absent. One command where the scheduler allows it."""
        out = {}
        for job_id in job_ids:
            state, _ = self.job_state(job_id)
            if state != "UNKNOWN":
                out[job_id] = (state, "")
        return out

    def pending_problem(self, reason: str) -> str | None:
        """What to change when a pending job's ``reason`` will never clear by waiting (a limit of the
        partition or queue, an account it may not use); None for a reason that clears (resources,
        priority) or one the scheduler does not give."""
        return None

    def pending_unsure(self, reason: str) -> bool:
        """A pending job's reason that clears only when nodes come back (down, drained, reserved):
        the run waits for it at most ``worker_start_timeout`` with no worker at all."""
        return False

    def queue_problems(self, script: str, driver: bool = False) -> list[str]:
        """A job script against the queue's limits (run time, memory, cores, accounts), where the
        scheduler's own check would let it through and the job would wait forever; ``driver``:
        the driver's own job (its settings are submit's options)."""
        return []

    def ended_jobs(self, job_names: set[str], since: float = 0.0) -> list[str]:
        """Worker jobs of these names the scheduler ended for a reason (memory, run time, node)."""
        return []

    # -- the driver as a batch job (zarrmill submit) -----------------------------------------------
    directive = ""  # the job script's directive prefix
    job_id_token = ""  # what the scheduler replaces by the job id in the log path

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        """The directives of the driver job: its name, log, run time and memory."""
        raise NotImplementedError

    def inherited_directives(self, settings: Mapping[str, Any], given: list[str]) -> list[str]:
        """Directives the driver job takes from the workflow's ``executor.<kind>`` settings (the
        partition and account its workers use) where the user's own ``given`` set none."""
        return []

    def driver_job(self, script: str, job_name: str, log: str, time: str, mem: str) -> tuple[str, str]:
        """(file to submit, its text): the driver script itself on most schedulers."""
        return "sh", script

    def submit_file(self, path: Path) -> str:
        """Submit a driver job file; its job id."""
        raise NotImplementedError

    def follow_hint(self, job_id: str) -> str:
        return ""


def jobqueue_module(name: str) -> Any:
    """A module of dask-jobqueue, imported without its side effect on this process: importing the
    package makes Ctrl-C call ``sys.exit()`` (its runner module sets a SIGINT handler at import),
    so an interrupted run ended with exit 0 as if it had succeeded. The handler in force before
    the import is put back."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        return importlib.import_module(name)
    finally:
        if main and before is not None and signal.getsignal(signal.SIGINT) is not before:
            signal.signal(signal.SIGINT, before)


def run_command(args: list[str], timeout: float = 60, input: str | None = None, what: str = "") -> str:
    """Run a scheduler command; its failure is one error with exit code and the scheduler's words."""
    log.info("running: %s", " ".join(args))
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError as err:
        raise SchedulerCommandError(f"{args[0]} not found: is {what or 'the scheduler'} installed and on PATH?") from err
    except subprocess.TimeoutExpired as err:
        raise SchedulerCommandError(f"{' '.join(args)} timed out after {timeout:.0f}s") from err
    if proc.returncode != 0:
        raise SchedulerCommandError(
            f"{' '.join(args)} failed with exit code {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def walltime_number_problem(value: float) -> str:
    """A walltime YAML read as a number (an unquoted 24:00:00 is 86400): say so and how to quote it."""
    seconds = int(value) if value >= 0 else 0
    hms = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return (f"{value!r} is a number, not a walltime (YAML reads an unquoted {hms} as {seconds}); write it "
            f"quoted, e.g. walltime: '{hms}'")


def job_script_value(name: str, value: object) -> None:
    """A value that goes into a job script: one line, no control characters (a newline in a shared
    workflow's walltime or scheduler option would be a new command in the script). Lists are
    checked item by item."""
    from ....io.storage.secrets import refuse_secret_url

    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, str) and _CONTROL.search(item):
            raise ConfigError(f"{name}: {item!r} contains a newline or control character; job script values "
                              "must be one plain line")
        if isinstance(item, str):
            refuse_secret_url(item, name)  # a job script is a file, kept by the scheduler too


def checked_script(script: str, what: str) -> str:
    """A whole job script before it is printed, written or submitted: one carrying a credential
    (from a value no single check saw: a prologue line, dask-jobqueue's own config) is refused,
    never written with it nor silently run without it."""
    from ....io.storage.secrets import refuse_secret_url

    refuse_secret_url(script, what)
    return script


_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+@%:,=-]+")


def shell_safe_path(name: str, value: object) -> None:
    """dask-jobqueue writes paths (worker local directory, TLS key files in the run folder, logs)
    into the job script unquoted, so a path with a space or a shell character would be split or
    run as a command: such paths are refused, naming the setting."""
    if value is not None and not _SHELL_SAFE.fullmatch(str(value)):
        raise ConfigError(f"{name}: {str(value)!r} has spaces or shell characters, which dask-jobqueue puts into "
                          "job scripts unquoted; use a path of letters, digits and ._/+@%:,=- (e.g. --set "
                          "executor.run_dir=/scratch/$USER/zarrmill-runs)")


def sanitize_job_name(name: str, max_len: int = 40) -> str:
    """Job names every scheduler takes: letters, digits, - _ . only (SGE refuses a name that
    starts with a digit; spaces and slashes break scripts and logs)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    cleaned = cleaned or "zarrmill"
    return (cleaned if cleaned[0].isalpha() else f"zm-{cleaned}")[:max_len]


def tail_file(path: Path, lines: int = 5) -> str:
    try:
        content = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in content[-lines:])
