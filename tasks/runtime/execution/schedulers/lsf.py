"""IBM Spectrum LSF through dask-jobqueue's LSFCluster (``#BSUB`` directives, ``bsub`` and ``bkill``).
LSF's run limit (``-W``) is ``[hours:]minutes``: a walltime written ``HH:MM:SS`` is turned into
that. No LSF cluster was at hand: job scripts are checked, not run."""
from __future__ import annotations

import re
from typing import Any

from pathlib import Path

from ....errors import ConfigError
from .base import Scheduler, SchedulerCommandError, run_command


def lsf_walltime(value: str) -> str:
    """``HH:MM:SS`` or ``HH:MM`` or minutes -> LSF's ``HH:MM`` (seconds rounded up)."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d+):(\d{1,2}):(\d{1,2})", text)
    if match:
        hours, minutes, seconds = (int(g) for g in match.groups())
        minutes += 1 if seconds else 0
        return f"{hours + minutes // 60:02d}:{minutes % 60:02d}"
    if re.fullmatch(r"\d+(:\d{1,2})?", text):
        return text
    raise ConfigError(f"walltime {value!r}: LSF takes HH:MM:SS, HH:MM or minutes")


class LSF(Scheduler):
    kind, label = "lsf", "LSF"
    cluster_class, job_module, job_class = "LSFCluster", "dask_jobqueue.lsf", "LSFJob"
    submit_command, cancel_command = "bsub", "bkill"
    walltime_forms = "HH:MM, HH:MM:SS or minutes"  # made HH:MM (lsf_walltime)
    rank, allocated_cpus_variable = 4, "LSB_DJOB_NUMPROC"  # (LSB_MAX_MEM_RUSAGE is a use, not a limit)
    settings_help = "lsf: LSFCluster settings (queue, project, cores, memory, walltime as HH:MM, ...), over jobqueue.lsf"

    def _two_part_seconds(self, first: float, second: float) -> float:
        return first * 3600 + second * 60  # LSF's HH:MM

    def settings(self, resources: dict[str, Any]) -> dict[str, Any]:
        out = super().settings(resources)
        if out.get("walltime"):
            out["walltime"] = lsf_walltime(out["walltime"])
        return out

    directive, job_id_token = "#BSUB", "%J"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return [f"-J {job_name}", f"-o {log}", f"-W {lsf_walltime(time)}", "-n 1", f'-R "rusage[mem={mem}]"']

    def submit_file(self, path: Path) -> str:
        out = run_command(["bsub"], input=path.read_text(), what="LSF")  # bsub reads #BSUB lines from stdin
        match = re.search(r"Job <(\d+)>", out)
        if not match:
            raise SchedulerCommandError(f"unexpected bsub output: {out.strip()!r}")
        return match.group(1)

    def follow_hint(self, job_id: str) -> str:
        return f"bjobs {job_id}"


SCHEDULER = LSF()
