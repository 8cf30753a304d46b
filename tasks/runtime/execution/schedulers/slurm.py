"""SLURM: the few commands zarrmill calls itself (dask-jobqueue's SLURMCluster does the rest),
pure parsers of their output, and the Scheduler interface filled with them."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Mapping

from ....errors import ConfigError
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


# sbatch's words when slurmctld does not answer (a failover, the network): not the script's fault
UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                         r"Zero Bytes were transmitted", re.IGNORECASE)

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
    return parse_scontrol_jobs_like(text, "JobId=")


def parse_scontrol_jobs_like(text: str, first_key: str) -> list[dict[str, str]]:
    """``scontrol show job|partition -o`` (one line each) -> each line's Key=Value pairs."""
    return [parse_scontrol_job(line) for line in text.splitlines() if line.strip().startswith(first_key)]


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


def parse_squeue_states(text: str) -> dict[str, tuple[str, str]]:
    """``squeue -h -t all -o %i|%T|%r`` -> {job id: (state, reason it waits)}."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0]:
            out[parts[0]] = (parts[1], "" if parts[2] in ("None", "(null)") else parts[2])
    return out


def job_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    if not job_ids:
        return {}
    try:
        return parse_squeue_states(run_slurm(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)]))
    except SlurmCommandError as err:
        if "Invalid job id" in str(err):  # none of them is listed any more
            return {}
        raise


# Reasons a pending job never leaves by waiting (squeue's %r, slurm's job_reason names): the
# setting to change. Resources, Priority, a held job or a node being drained do clear.
NEVER_CLEARS = {
    "PartitionTimeLimit": "executor.slurm.walltime is over the partition's MaxTime: lower it or choose another "
                          "partition (executor.slurm.queue)",
    "PartitionConfig": "the partition cannot run this job (memory, cores or its state): check executor.slurm.queue, "
                       "memory and cores",
    "QOSMaxWallDurationPerJobLimit": "executor.slurm.walltime is over the QOS's limit: lower it or choose another QOS",
    "QOSMaxMemoryPerJob": "executor.slurm.memory is over the QOS's limit per job: lower it",
    "QOSMaxCpuPerJobLimit": "executor.slurm.cores is over the QOS's limit per job: lower it",
    "QOSMaxNodePerJobLimit": "the job asks more nodes than the QOS allows",
    "AssocMaxWallDurationPerJobLimit": "executor.slurm.walltime is over your account's limit: lower it",
    "AssocMaxCpuPerJobLimit": "executor.slurm.cores is over your account's limit per job: lower it",
    "AssocMaxMemPerJob": "executor.slurm.memory is over your account's limit per job: lower it",
    "InvalidAccount": "executor.slurm.account is not an account you may use",
    "InvalidQOS": "the QOS asked for (job_extra_directives) is not one you may use",
    "AccountNotAllowed": "executor.slurm.account may not use this partition: choose another queue or account",
    "QOSNotAllowed": "the QOS may not use this partition",
    "DependencyNeverSatisfied": "a dependency in executor.slurm.job_extra_directives can never be met",
    "BadConstraints": "the node constraints (job_extra_directives --constraint) match no node",
}
# Reasons that clear only when nodes come back (down, drained, reserved for maintenance): waited for,
# shown, and the run ends only after worker_start_timeout without any worker (pool_keeper.py)
NODES_AWAY = ("ReqNodeNotAvail", "PartitionNodeLimit", "PartitionDown", "NodeDown", "Reservation")


def _minutes(value: str) -> float:
    """A SLURM time ([D-]HH:MM:SS, MM:SS, minutes, UNLIMITED) in minutes; inf when unlimited."""
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return float("inf")
    return SCHEDULER.walltime_seconds(value) / 60


def _megabytes(value: str) -> float:
    """--mem / MaxMemPerNode (``954M``, ``4G``, ``1024``: MB) in MB; inf when unlimited."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", value.strip().upper())
    if value.upper() == "UNLIMITED" or not match:
        return float("inf")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[match.group(2)]
    return float(match.group(1)) * scale


def script_directives(script: str) -> dict[str, str]:
    """The job script's ``#SBATCH`` options by long name (``-p x`` -> partition, ``-t`` -> time)."""
    short = {"p": "partition", "t": "time", "A": "account", "n": "ntasks", "c": "cpus-per-task", "q": "qos"}
    found: dict[str, str] = {}
    for line in script.splitlines():
        match = re.match(r"#SBATCH\s+(--([\w-]+)(?:[= ](\S+))?|-(\w)\s*(\S*))", line.strip())
        if match and match.group(2):
            found[match.group(2)] = match.group(3) or ""
        elif match and match.group(4):
            found[short.get(match.group(4), match.group(4))] = match.group(5)
    return found


# what a user changes for each directive: in the workflow for worker jobs, on submit's command line
# for the driver's own job
WORKER_SETTINGS = {"time": "executor.slurm.walltime", "mem": "executor.slurm.memory", "cpus": "executor.slurm.cores",
                   "account": "executor.slurm.account", "partition": "executor.slurm.queue",
                   "qos": "executor.slurm.job_extra_directives"}
DRIVER_SETTINGS = {"time": "--time", "mem": "--mem", "cpus": "--directive=--cpus-per-task",
                   "account": "--directive=--account", "partition": "--directive=--partition",
                   "qos": "--directive=--qos"}


def partition_problems(directives: dict[str, str], partitions: list[dict[str, str]],
                       names: dict[str, str] = WORKER_SETTINGS) -> list[str]:
    """What SLURM would queue but never start: run time, memory, cores over the partition's limits,
    an account or QOS it does not allow (partition limits are not enforced at submission unless
    EnforcePartLimits says so, and ``sbatch --test-only`` passes them)."""
    name = directives.get("partition")
    chosen = [p for p in partitions if (p.get("PartitionName") == name if name else p.get("Default") == "YES")]
    if not chosen:
        return []  # a partition that does not exist: sbatch --test-only says so in its own words
    part, problems = chosen[0], []
    pname = part.get("PartitionName", "?")
    asked_time = directives.get("time", "")
    if asked_time and _minutes(asked_time) > _minutes(part.get("MaxTime", "UNLIMITED")):
        problems.append(f"{names['time']}: {asked_time} is over partition {pname}'s MaxTime "
                        f"{part.get('MaxTime')}; lower it or choose another partition ({names['partition']})")
    asked_mem = directives.get("mem", "")
    if asked_mem and _megabytes(asked_mem) > _megabytes(part.get("MaxMemPerNode", "UNLIMITED")):
        problems.append(f"{names['mem']}: {asked_mem} is over partition {pname}'s MaxMemPerNode "
                        f"{part.get('MaxMemPerNode')}M; lower it or choose another partition")
    cpus = int(directives.get("cpus-per-task") or 1) * int(directives.get("ntasks") or 1)
    max_cpus = part.get("MaxCPUsPerNode", "UNLIMITED")
    if max_cpus.isdigit() and cpus > int(max_cpus):
        problems.append(f"{names['cpus']}: {cpus} CPUs are over partition {pname}'s MaxCPUsPerNode {max_cpus}; "
                        "lower it or choose another partition")
    account = directives.get("account", "")
    allowed = part.get("AllowAccounts", "ALL")
    denied = part.get("DenyAccounts", "")
    if account and ((allowed != "ALL" and account not in allowed.split(",")) or account in denied.split(",")):
        problems.append(f"{names['account']}: partition {pname} does not allow account {account} "
                        f"(AllowAccounts={allowed}); choose another account or partition")
    qos = directives.get("qos", "")
    allowed_qos = part.get("AllowQos", "ALL")
    if qos and allowed_qos != "ALL" and qos not in allowed_qos.split(","):
        problems.append(f"{names['qos']}: partition {pname} does not allow QOS {qos} (AllowQos={allowed_qos})")
    return problems


class SLURM(Scheduler):
    kind, label = "slurm", "SLURM"
    cluster_class, job_module, job_class = "SLURMCluster", "dask_jobqueue.slurm", "SLURMJob"
    submit_command, cancel_command = "sbatch", "scancel"
    ended_states = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "COMPLETED",
                              "PREEMPTED", "DEADLINE", "REVOKED"})
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

    def check_script(self, script: str, what: str = "the worker jobs", driver: bool = False) -> None:
        """``sbatch --test-only``: SLURM judges partition, memory, time and account at once and says
        what is wrong, instead of the run waiting for workers that never come."""
        problems = self.queue_problems(script, driver)
        if problems:
            raise ConfigError(f"SLURM would never start {what}: {problems[0]}", problems)
        try:
            run_slurm(["sbatch", "--test-only"], input=script)
        except SchedulerCommandError as err:
            detail = "; ".join(line.strip() for line in str(err).split(": ", 1)[-1].splitlines() if line.strip())
            if UNREACHABLE.search(detail) or "not found: is SLURM installed" in str(err):
                raise  # the cluster did not answer (exit 1): not a setting to change
            where = ("--time, --mem and --directive" if driver
                     else "executor.slurm: queue, memory, walltime, account")
            raise ConfigError(f"SLURM rejects {what}: {detail} (check {where})") from None

    def queue_problems(self, script: str, driver: bool = False) -> list[str]:
        try:
            partitions = parse_scontrol_jobs_like(run_slurm(["scontrol", "show", "partition", "-o"]), "PartitionName=")
        except SchedulerCommandError:
            return []  # sbatch --test-only still judges the script
        return partition_problems(script_directives(script), partitions, DRIVER_SETTINGS if driver else WORKER_SETTINGS)

    def job_states(self, job_ids: list[str]) -> dict[str, tuple[str, str]]:
        return job_states(job_ids)

    def pending_problem(self, reason: str) -> str | None:
        return NEVER_CLEARS.get(reason.split(",")[0].strip())

    def pending_unsure(self, reason: str) -> bool:
        return reason.split(",")[0].strip() in NODES_AWAY

    def job_state(self, job_id: str) -> tuple[str, str]:
        return job_state(job_id)

    directive, job_id_token = "#SBATCH", "%j"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return [f"--job-name={job_name}", f"--output={log}", f"--time={time}", f"--mem={mem}", "--cpus-per-task=1"]

    def inherited_directives(self, settings: Mapping[str, Any], given: list[str]) -> list[str]:
        out = []
        for key, option, short in (("queue", "--partition", "-p"), ("account", "--account", "-A")):
            named = any(d.startswith((option, short)) for d in given)
            if settings.get(key) and not named:
                out.append(f"{option}={settings[key]}")
        return out

    def submit_file(self, path: Path) -> str:
        return parse_sbatch_parsable(run_slurm(["sbatch", "--parsable", str(path)]))

    def follow_hint(self, job_id: str) -> str:
        return f"squeue -j {job_id}"

    def ended_jobs(self, job_names: set[str], since: float = 0.0) -> list[str]:
        return ended_jobs(job_names, since)


SCHEDULER = SLURM()
