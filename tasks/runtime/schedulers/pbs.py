"""PBS Pro, OpenPBS and Torque through dask-jobqueue's PBSCluster (``#PBS`` directives, ``qsub`` and
``qdel``). No PBS server was at hand: job scripts are checked against PBS's documented syntax and
dask-jobqueue's own, not run."""
from __future__ import annotations

from .base import Scheduler


class PBS(Scheduler):
    kind, label = "pbs", "PBS"
    cluster_class, job_module, job_class = "PBSCluster", "dask_jobqueue.pbs", "PBSJob"
    submit_command, cancel_command = "qsub", "qdel"
