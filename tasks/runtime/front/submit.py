"""``zarrmill submit``: run the workflow driver itself as a batch job, so users can log out, on any
registered batch scheduler (its directives: schedulers/). The driver then starts its worker jobs
through dask-jobqueue as usual."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..execution.schedulers import DEFAULT_BATCH_KIND, scheduler
from ..execution.schedulers.base import checked_script, job_script_value, sanitize_job_name, shell_safe_path

BODY = """
# zarrmill workflow driver: plans steps, submits worker jobs (dask-jobqueue), records progress.
# Rerunning the same command resumes: finished units are skipped.
set -euo pipefail
export PYTHONSAFEPATH=1   # a tasks.py in this folder must never shadow the zarrmill package
cd {cwd}
exec {command}
"""


def driver_script(workflow: Path, sets: list[str], time: str, mem: str, directives: list[str],
                  log_dir: Path, overwrite: bool, kind: str = DEFAULT_BATCH_KIND) -> tuple[str, Path]:
    """(the driver's job script, its log path with the scheduler's job id token)."""
    batch = scheduler(kind)
    for name, value in (("--time", time), ("--mem", mem), ("--directive", directives), ("--set", sets),
                        ("--log-dir", str(log_dir)), ("workflow", str(workflow))):
        job_script_value(name, value)
    shell_safe_path("--log-dir", log_dir.resolve())  # it goes into a directive line as is
    log_dir = log_dir.resolve()
    job_name = sanitize_job_name(f"zm-driver-{workflow.stem}")
    log = log_dir / f"{sanitize_job_name(workflow.stem)}-driver-{batch.job_id_token or 'job'}.out"
    cmd = [sys.executable, "-m", "zarrmill", "run", str(workflow.resolve())]
    for item in sets:
        cmd += ["--set", item]
    if overwrite:
        cmd.append("--overwrite")
    lines = ["#!/usr/bin/env bash"]
    if batch.directive:
        lines += [f"{batch.directive} {d}" for d in batch.driver_directives(job_name, str(log), time, mem) + directives]
    script = "\n".join(lines) + BODY.format(cwd=shlex.quote(str(Path.cwd())),
                                              command=" ".join(shlex.quote(c) for c in cmd))
    return script, log


def submit_workflow(workflow: Path, sets: list[str], time: str, mem: str, directives: list[str],
                    log_dir: Path, print_only: bool, overwrite: bool = False, kind: str = DEFAULT_BATCH_KIND
                    ) -> tuple[str | None, str, Path]:
    batch = scheduler(kind)
    script, log = driver_script(workflow, sets, time, mem, directives, log_dir, overwrite, kind)
    suffix, text = batch.driver_job(script, sanitize_job_name(f"zm-driver-{workflow.stem}"), str(log), time, mem)
    stem = log_dir.resolve() / f"{sanitize_job_name(workflow.stem)}-driver"
    if suffix != "sh":  # a submit description running the script (schedulers without directives)
        text = text.replace("{script}", str(stem.with_suffix(".sh")))
    for written in (script, text):  # nothing printed or written carries a credential
        checked_script(written, "the driver job script (--set, --directive, --sbatch-arg or the workflow path)")
    if print_only:
        return None, text if suffix == "sh" else f"{text}\n# {stem.with_suffix('.sh')}:\n{script}", log
    batch.check_script(script, "the driver job", driver=True)  # its partition, time and memory, before anything is written
    log_dir.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".sh").write_text(script)
    stem.with_suffix(".sh").chmod(0o755)
    path = stem.with_suffix(".sh") if suffix == "sh" else stem.with_suffix(f".{suffix}")
    if suffix != "sh":
        path.write_text(text)
    job_id = batch.submit_file(path)
    return job_id, script, Path(str(log).replace(batch.job_id_token, job_id) if batch.job_id_token else str(log))
