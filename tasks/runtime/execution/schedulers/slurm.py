"""SLURM: the few commands zarrmill calls itself (dask-jobqueue's SLURMCluster does the rest),
pure parsers of their output, and the Scheduler interface filled with them."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Mapping

from ....errors import ExecutorError
from .base import Scheduler, SchedulerCommandError, run_command, tail_file

SlurmCommandError = SchedulerCommandError


def run_slurm(args: list[str], timeout: float = 60, input: str | None = None) -> str:
    return run_command(args, timeout, input, what="SLURM")


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


class SLURM(Scheduler):
    kind, label = "slurm", "SLURM"
    cluster_class, job_module, job_class = "SLURMCluster", "dask_jobqueue.slurm", "SLURMJob"
    submit_command, cancel_command = "sbatch", "scancel"
    ended_states = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "COMPLETED"})
    # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit
    walltime_pattern = r"(\d+-)?\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE"
    walltime_forms = "HH:MM:SS, D-HH:MM:SS or minutes"
    rank, allocated_cpus_variable = 1, "SLURM_CPUS_ON_NODE"
    settings_help = ("slurm: SLURMCluster settings (queue, account, cores, memory, walltime, processes, "
                     "job_extra_directives, job_script_prologue, interface, log_directory, ...); they override "
                     "dask-jobqueue's own config (jobqueue.yaml, DASK_JOBQUEUE__SLURM__* variables)")

    def allocated_memory(self, env: Mapping[str, str]) -> int | None:
        megabytes = env.get("SLURM_MEM_PER_NODE", "")
        return int(megabytes) * 2**20 if megabytes.strip().isdigit() and int(megabytes) else None

    def check_script(self, script: str) -> None:
        """``sbatch --test-only``: SLURM judges partition, memory, time and account at once and says
        what is wrong, instead of the run waiting for workers that never come."""
        try:
            run_slurm(["sbatch", "--test-only"], input=script)
        except SchedulerCommandError as err:
            detail = "; ".join(line.strip() for line in str(err).split(": ", 1)[-1].splitlines() if line.strip())
            raise ExecutorError(f"SLURM rejects the worker jobs: {detail} (check executor.slurm: queue, memory, "
                                "walltime, account)") from None

    def job_state(self, job_id: str) -> tuple[str, str]:
        return job_state(job_id)

    directive, job_id_token = "#SBATCH", "%j"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return [f"--job-name={job_name}", f"--output={log}", f"--time={time}", f"--mem={mem}", "--cpus-per-task=1"]

    def submit_file(self, path: Path) -> str:
        return parse_sbatch_parsable(run_slurm(["sbatch", "--parsable", str(path)]))

    def follow_hint(self, job_id: str) -> str:
        return f"squeue -j {job_id}"

    def ended_jobs(self, job_names: set[str], since: float = 0.0) -> list[str]:
        return ended_jobs(job_names, since)


SCHEDULER = SLURM()
