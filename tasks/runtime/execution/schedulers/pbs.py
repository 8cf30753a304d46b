"""PBS Pro, OpenPBS and Torque through dask-jobqueue's PBSCluster (``#PBS`` directives, ``qsub`` and
``qdel``). No PBS server was at hand: job scripts are checked against PBS's documented syntax and
dask-jobqueue's own, not run."""
from __future__ import annotations

from pathlib import Path

from .base import Scheduler, SchedulerCommandError, run_command


class PBS(Scheduler):
    kind, label = "pbs", "PBS"
    cluster_class, job_module, job_class = "PBSCluster", "dask_jobqueue.pbs", "PBSJob"
    submit_command, cancel_command = "qsub", "qdel"
    walltime_pattern = r"\d+(:\d{1,2}){0,2}(\.\d+)?"  # [[hours:]minutes:]seconds[.milliseconds]
    directive, job_id_token = "#PBS", ""  # PBS does not put the job id into -o paths
    rank, allocated_cpus_variable = 3, "NCPUS"
    settings_help = ("pbs: PBSCluster settings (queue, account, resource_spec, cores, memory, walltime, ...), over "
                     "jobqueue.pbs")

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return [f"-N {job_name}", f"-o {log}", "-j oe", f"-l walltime={time}", f"-l select=1:ncpus=1:mem={mem}B"
                if mem[-1:].upper() in "KMGT" else f"-l select=1:ncpus=1:mem={mem}"]

    def submit_file(self, path: Path) -> str:
        out = run_command(["qsub", str(path)], what="PBS").strip()
        if not out or not out.split(".")[0].isdigit():
            raise SchedulerCommandError(f"unexpected qsub output: {out!r}")
        return out

    def follow_hint(self, job_id: str) -> str:
        return f"qstat {job_id}"


SCHEDULER = PBS()
