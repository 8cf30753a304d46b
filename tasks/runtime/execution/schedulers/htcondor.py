"""HTCondor through dask-jobqueue's HTCondorCluster: a submit description (not a shell script),
``condor_submit`` and ``condor_rm``. HTCondor has no run-time limit in the submit description
dask-jobqueue writes, so a walltime is not passed on; it asks for disk per job (1GB unless said).
No HTCondor pool was at hand: submit descriptions are checked, not run."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .base import Scheduler, SchedulerCommandError, run_command


class HTCondor(Scheduler):
    kind, label = "htcondor", "HTCondor"
    cluster_class, job_module, job_class = "HTCondorCluster", "dask_jobqueue.htcondor", "HTCondorJob"
    submit_command, cancel_command = "condor_submit", "condor_rm"
    defaults = {"cores": 1, "memory": "4GB", "disk": "1GB", "processes": 1}
    walltime_pattern = None  # not a setting of HTCondorCluster; a step's resources.walltime is dropped
    rank, allocated_cpus_variable = 5, "_CONDOR_NPROCS"  # (and OMP_NUM_THREADS, for request_cpus)
    settings_help = ("htcondor: HTCondorCluster settings (cores, memory, disk, job_extra_directives, ...), over "
                     "jobqueue.htcondor")

    def settings(self, resources: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in super().settings(resources).items() if k != "walltime"}

    job_id_token = "$(ClusterId)"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return []  # the submit description says it all (driver_job)

    def driver_job(self, script: str, job_name: str, log: str, time: str, mem: str) -> tuple[str, str]:
        """A submit description running the driver script (HTCondor submits descriptions, not
        scripts): the script beside it, given as its executable."""
        return "sub", "\n".join([
            f"batch_name = {job_name}", "executable = {script}", f"output = {log}", f"error = {log}",
            f"log = {log}.condor", "request_cpus = 1", f"request_memory = {mem}",
            "getenv = True", "queue", ""])

    def submit_file(self, path: Path) -> str:
        out = run_command(["condor_submit", str(path)], what="HTCondor")
        match = re.search(r"submitted to cluster (\d+)", out)
        if not match:
            raise SchedulerCommandError(f"unexpected condor_submit output: {out.strip()!r}")
        return match.group(1)

    def follow_hint(self, job_id: str) -> str:
        return f"condor_q {job_id}"


SCHEDULER = HTCondor()
