"""The few SLURM commands zarrmill calls itself (dask-jobqueue does the rest): one helper that logs
the command and raises with exit code, stdout and stderr, plus pure parsers of their output."""
from __future__ import annotations

import logging
import re
import subprocess
import time
from pathlib import Path

from ..errors import ConfigError, ExecutorError

log = logging.getLogger("zarrmill.slurm")


class SlurmCommandError(ExecutorError):
    pass


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def job_script_value(name: str, value: object) -> None:
    """A value that goes into a job script: one line, no control characters (a newline in a shared
    workflow's walltime or sbatch option would be a new command in the script). Lists are checked
    item by item."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, str) and _CONTROL.search(item):
            raise ConfigError(f"{name}: {item!r} contains a newline or control character; job script values "
                              "must be one plain line")


_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+@%:,=-]+")


def shell_safe_path(name: str, value: object) -> None:
    """dask-jobqueue writes paths (worker local directory, TLS key files in the run folder, logs)
    into the job script unquoted, so a path with a space or a shell character would be split or
    run as a command: such paths are refused, naming the setting."""
    if value is not None and not _SHELL_SAFE.fullmatch(str(value)):
        raise ConfigError(f"{name}: {str(value)!r} has spaces or shell characters, which dask-jobqueue puts into "
                          "job scripts unquoted; use a path of letters, digits and ._/+@%:,=- (e.g. --set "
                          "executor.run_dir=/scratch/$USER/zarrmill-runs)")


def run_slurm(args: list[str], timeout: float = 60, input: str | None = None) -> str:
    log.info("running: %s", " ".join(args))
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError as err:
        raise SlurmCommandError(f"{args[0]} not found: is SLURM installed and on PATH?") from err
    except subprocess.TimeoutExpired as err:
        raise SlurmCommandError(f"{' '.join(args)} timed out after {timeout:.0f}s") from err
    if proc.returncode != 0:
        raise SlurmCommandError(
            f"{' '.join(args)} failed with exit code {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def parse_sbatch_parsable(text: str) -> str:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise SlurmCommandError(f"unexpected sbatch output: {text.strip()!r}")
    return job_id


def parse_sacct_states(text: str) -> dict[str, tuple[str, str]]:
    """``sacct -c -P -n -o JobID,State,ExitCode`` -> {job id: (state, exit code)}; steps skipped."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] and "." not in parts[0]:
            out[parts[0]] = (parts[1].split()[0] if parts[1] else "", parts[2])
    return out


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``scontrol show job ID`` -> its Key=Value pairs."""
    return dict(re.findall(r"(\w+)=(\S*)", text))


def job_state(job_id: str) -> tuple[str, str]:
    """(state, exit code) of a job, from scontrol while SLURM remembers it, else ``sacct -c``."""
    try:
        info = parse_scontrol_job(run_slurm(["scontrol", "show", "job", job_id]))
        return info.get("JobState", "UNKNOWN"), info.get("ExitCode", "")
    except SlurmCommandError:
        pass
    try:
        text = run_slurm(["sacct", "-c", "-P", "-n", "-j", job_id, "-o", "JobID,State,ExitCode"])
        return parse_sacct_states(text).get(job_id, ("UNKNOWN", ""))
    except SlurmCommandError:
        return "UNKNOWN", ""


def tail_file(path: Path, lines: int = 5) -> str:
    try:
        content = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in content[-lines:])


def sanitize_job_name(name: str, max_len: int = 40) -> str:
    """SLURM job names: letters, digits, - _ . only (spaces and slashes break scripts and logs)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return (cleaned or "zarrmill")[:max_len]


# why SLURM ended a job, in words a user can act on
END_REASONS = {
    "OUT_OF_MEMORY": "ran out of memory: raise executor.slurm.memory (or a step's resources.memory)",
    "TIMEOUT": "reached its walltime: raise executor.slurm.walltime (or a step's resources.walltime)",
    "NODE_FAIL": "lost its node",
    "PREEMPTED": "was preempted",
    "BOOT_FAIL": "failed to boot",
}


def parse_scontrol_jobs(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` (one line per job) -> each job's Key=Value pairs."""
    return [parse_scontrol_job(line) for line in text.splitlines() if line.strip().startswith("JobId=")]


# What slurmstepd writes into a job's log when it kills it for memory: polling (jobacct_gather's
# OverMemoryKill, the job then ends FAILED) or the cgroup OOM killer (sometimes not OUT_OF_MEMORY).
_MEMORY_KILL = re.compile(r"exceeded (job )?memory limit|oom[-_ ]kill", re.IGNORECASE)


def end_state(job: dict[str, str]) -> str:
    """The job's state, OUT_OF_MEMORY also where SLURM recorded a memory kill as FAILED/CANCELLED."""
    state = job.get("JobState", "")
    if state in ("FAILED", "CANCELLED"):
        for key in ("StdErr", "StdOut"):
            if job.get(key) and _MEMORY_KILL.search(tail_file(job_log_path(job, key), lines=50)):
                return "OUT_OF_MEMORY"
    return state


def job_log_path(job: dict[str, str], key: str = "StdErr") -> Path:
    """scontrol shows the --output/--error pattern as given (dask-jobqueue: ``name-%J.err``)."""
    names = {"j": job.get("JobId", ""), "J": job.get("JobId", ""), "x": job.get("JobName", ""), "%": "%"}
    return Path(re.sub(r"%([jJx%])", lambda m: names[m.group(1)], job.get(key, "")))


def ended_jobs(job_names: set[str], since: float = 0.0) -> list[str]:
    """Worker jobs of these names, submitted since ``since`` (epoch seconds), that SLURM ended for
    a reason (out of memory, walltime, node failure)."""
    try:
        jobs = parse_scontrol_jobs(run_slurm(["scontrol", "show", "job", "-o"]))
    except SlurmCommandError:
        return []
    ended = [(j, end_state(j)) for j in jobs if j.get("JobName") in job_names and _submitted(j) >= since]
    return [f"worker job {j.get('JobId')} {state} ({END_REASONS[state]})" for j, state in ended
            if state in END_REASONS]


def _submitted(job: dict[str, str]) -> float:
    try:
        return time.mktime(time.strptime(job.get("SubmitTime", ""), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return float("inf")  # unknown: do not hide it
