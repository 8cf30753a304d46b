"""Run a whole workflow: each step in dependency order on the executor's client for its resources."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .engine import StepOptions, StepReport, run_step
from .executors import Executor
from .registry import get_task
from .slurm import sanitize_job_name
from .workflow import Workflow


def default_run_dir(workflow: Workflow) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / "zarrmill-runs" / f"{sanitize_job_name(workflow.name)}-{stamp}"


def run_workflow(wf: Workflow, overwrite: bool = False, dry_run: bool = False,
                 only: list[str] | None = None) -> list[StepReport]:
    steps = [s for s in wf.steps if not only or s.name in only]
    if dry_run:
        for s in steps:
            needs = f" (needs {', '.join(s.needs)})" if s.needs else ""
            print(f"{s.name}: {s.task} -> {s.params.ledger_root()}{needs}")
        return []
    run_dir = Path(wf.executor.run_dir) if wf.executor.run_dir else default_run_dir(wf)
    run_dir.mkdir(parents=True, exist_ok=True)
    reports = []
    changed: set[str] = set()
    with Executor(wf.executor, wf.name, run_dir) as executor:
        for step in steps:
            opts = StepOptions(overwrite=overwrite, retries=wf.executor.retries,
                               upstream_changed=any(n in changed for n in step.needs))
            report = run_step(step.name, get_task(step.task), step.params,
                              lambda: executor.client_for(step.resources), opts)
            if report.ran:
                changed.add(step.name)
            rate = report.bytes / 1e6 / report.unit_seconds if report.unit_seconds else 0.0
            print(f"[{step.name}] done: {report.ran} units run, {report.skipped} skipped, "
                  f"{report.bytes / 1e6:.1f} MB in {report.seconds:.1f}s (units {report.unit_seconds:.1f}s, "
                  f"{rate:.0f} MB/s)", file=sys.stderr, flush=True)
            reports.append(report)
    return reports
