"""HTCondor through dask-jobqueue's HTCondorCluster: a submit description (not a shell script),
``condor_submit`` and ``condor_rm``. HTCondor has no run-time limit in the submit description
dask-jobqueue writes, so a walltime is not passed on; it asks for disk per job (1GB unless said).
No HTCondor pool was at hand: submit descriptions are checked, not run."""
from __future__ import annotations

from typing import Any

from .base import Scheduler


class HTCondor(Scheduler):
    kind, label = "htcondor", "HTCondor"
    cluster_class, job_module, job_class = "HTCondorCluster", "dask_jobqueue.htcondor", "HTCondorJob"
    submit_command, cancel_command = "condor_submit", "condor_rm"
    defaults = {"cores": 1, "memory": "4GB", "disk": "1GB", "processes": 1}

    def settings(self, resources: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in super().settings(resources).items() if k != "walltime"}
