"""Son of Grid Engine and Univa/Altair Grid Engine through dask-jobqueue's SGECluster: ``qsub -w v``
asks Grid Engine whether any queue would run a worker job before the run waits for one, and
``qstat``/``qacct`` say what became of a job."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from ....errors import ConfigError
from .base import Scheduler, SchedulerCommandError, run_command


def run_sge(args: list[str], timeout: float = 60, input: str | None = None) -> str:
    return run_command(args, timeout, input, what="Grid Engine")


def parse_qacct(text: str) -> dict[str, str]:
    """``qacct -j ID`` -> its last record's ``key value`` lines."""
    records = [r for r in re.split(r"^=+\s*$", text, flags=re.M) if r.strip()]
    if not records:
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)\s+(.*)$", records[-1], flags=re.M)}


# qacct's "failed" codes a user can act on (sge_status(5)); exit 137 is SIGKILL from a limit
END_REASONS = {"37": "reached its run time (h_rt): raise executor.sge.walltime (or a step's resources.walltime)",
               "100": "was killed by a limit (memory or run time): raise executor.sge.resource_spec or walltime"}


class SGE(Scheduler):
    kind, label = "sge", "Grid Engine"
    cluster_class, job_module, job_class = "SGECluster", "dask_jobqueue.sge", "SGEJob"
    submit_command, cancel_command = "qsub", "qdel"
    ended_states = frozenset({"FAILED", "COMPLETED"})
    rank, allocated_cpus_variable = 2, "NSLOTS"
    settings_help = ("sge: SGECluster settings (queue, project, resource_spec, cores, memory, walltime, ...), over "
                     "dask-jobqueue's jobqueue.sge config")

    def check_script(self, script: str, what: str = "the worker jobs", driver: bool = False) -> None:
        """``qsub -w v``: Grid Engine checks the job against every queue without submitting it. Not
        the driver's job: it asks ``mem_free``, a load value an empty-cluster check cannot judge."""
        if driver:
            return
        try:
            run_sge(["qsub", "-w", "v"], input=script)
        except SchedulerCommandError as err:
            detail = "; ".join(line.strip() for line in str(err).split(": ", 1)[-1].splitlines() if line.strip())
            raise ConfigError(f"Grid Engine rejects {what}: {detail} (check executor.sge: queue, "
                              "project, resource_spec, walltime)") from None

    def job_state(self, job_id: str) -> tuple[str, str]:
        try:
            run_sge(["qstat", "-j", job_id])
            return "RUNNING", ""  # pending or running: qstat still lists it
        except SchedulerCommandError:
            pass
        try:
            info = parse_qacct(run_sge(["qacct", "-j", job_id]))
        except SchedulerCommandError:
            return "UNKNOWN", ""
        failed = info.get("failed", "0").split()[0]
        return ("FAILED" if failed != "0" or info.get("exit_status", "0") != "0" else "COMPLETED"), info.get("exit_status", "")

    def ended_jobs(self, job_names: set[str], since: float = 0.0) -> list[str]:
        out = []
        for name in sorted(job_names):
            try:
                info = parse_qacct(run_sge(["qacct", "-j", name]))
            except SchedulerCommandError:
                continue
            failed = info.get("failed", "0").split()[0]
            if failed in END_REASONS:
                out.append(f"worker job {info.get('jobnumber', '?')} {END_REASONS[failed]}")
        return out

    directive, job_id_token = "#$", "$JOB_ID"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        # mem_free asks for a host with that much free memory; h_vmem would cap virtual memory,
        # which a Python driver's threads and mappings exceed long before its resident memory
        return [f"-N {job_name}", f"-o {log}", "-j y", f"-l h_rt={time}", f"-l mem_free={mem}", "-cwd", "-S /bin/bash"]

    def inherited_directives(self, settings: Mapping[str, Any], given: list[str]) -> list[str]:
        out = []
        for key, option in (("queue", "-q"), ("project", "-P")):
            if settings.get(key) and not any(d.split()[:1] == [option] for d in given):
                out.append(f"{option} {settings[key]}")
        return out

    def submit_file(self, path: Path) -> str:
        job_id = run_sge(["qsub", "-terse", str(path)]).strip().split(".")[0]
        if not job_id.isdigit():
            raise SchedulerCommandError(f"unexpected qsub output: {job_id!r}")
        return job_id

    def follow_hint(self, job_id: str) -> str:
        return f"qstat -j {job_id}"


SCHEDULER = SGE()
