"""``zarrmill submit``: run the workflow driver itself as an sbatch job, so users can log out.
The driver then starts its worker jobs through dask-jobqueue as usual."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .schedulers.base import job_script_value, sanitize_job_name, shell_safe_path
from .schedulers.slurm import parse_sbatch_parsable, run_slurm

TEMPLATE = """#!/usr/bin/env bash
#SBATCH --job-name={job_name}
#SBATCH --output={log}
#SBATCH --time={time}
#SBATCH --mem={mem}
#SBATCH --cpus-per-task=1
{extra}
# zarrmill workflow driver: plans steps, submits worker jobs (dask-jobqueue), records progress.
# Rerunning the same command resumes: finished units are skipped.
set -euo pipefail
export PYTHONSAFEPATH=1   # a tasks.py in this folder must never shadow the zarrmill package
cd {cwd}
exec {command}
"""


def driver_script(workflow: Path, sets: list[str], time: str, mem: str, sbatch_args: list[str],
                  log_dir: Path, overwrite: bool) -> tuple[str, Path]:
    for name, value in (("--time", time), ("--mem", mem), ("--sbatch-arg", sbatch_args), ("--set", sets),
                        ("--log-dir", str(log_dir)), ("workflow", str(workflow))):
        job_script_value(name, value)
    shell_safe_path("--log-dir", log_dir.resolve())  # it goes into an #SBATCH --output line as is
    log_dir = log_dir.resolve()
    log = log_dir / f"{sanitize_job_name(workflow.stem)}-driver-%j.out"
    cmd = [sys.executable, "-m", "zarrmill", "run", str(workflow.resolve())]
    for item in sets:
        cmd += ["--set", item]
    if overwrite:
        cmd.append("--overwrite")
    script = TEMPLATE.format(
        job_name=sanitize_job_name(f"zm-driver-{workflow.stem}"), log=log, time=time, mem=mem,
        extra="\n".join(f"#SBATCH {a}" for a in sbatch_args), cwd=shlex.quote(str(Path.cwd())),
        command=" ".join(shlex.quote(c) for c in cmd))
    return script, log


def submit_workflow(workflow: Path, sets: list[str], time: str, mem: str, sbatch_args: list[str],
                    log_dir: Path, print_only: bool, overwrite: bool = False) -> tuple[str | None, str, Path]:
    script, log = driver_script(workflow, sets, time, mem, sbatch_args, log_dir, overwrite)
    if print_only:
        return None, script, log
    log_dir.mkdir(parents=True, exist_ok=True)
    script_path = log_dir.resolve() / f"{sanitize_job_name(workflow.stem)}-driver.sbatch"
    script_path.write_text(script)
    job_id = parse_sbatch_parsable(run_slurm(["sbatch", "--parsable", str(script_path)]))
    return job_id, script, Path(str(log).replace("%j", job_id))
