"""Run a workflow: each step in dependency order on the executor's client for its resources, a
provenance entry in each step's output afterwards. ``for_each`` workflows go to foreach.py."""
from __future__ import annotations

import hashlib
import json
import sys
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ...errors import InputError
from .engine import run_step
from .step_run import StepOptions, StepReport
from .executors import Executor
from .ozx_output import ozx_target, run_ozx_step
from ..core.provenance import record_step, step_entry
from .registry import get_task
from ..core.rundirs import runs_root
from .schedulers import BATCH_KINDS, scheduler
from .schedulers.base import sanitize_job_name
from .workflow import Workflow


def default_run_dir(workflow: Workflow) -> Path:
    """``<runs root>/<name>-<time>-<random>``: one documented place, not the current folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return runs_root() / f"{sanitize_job_name(workflow.name)}-{stamp}-{uuid.uuid4().hex[:4]}"


def workflow_hash(wf: Workflow) -> str:
    """The workflow file as run: its text and the --set overrides."""
    text = Path(wf.source).read_bytes() if Path(wf.source).is_file() else wf.source.encode()
    return hashlib.sha256(text + "\n".join(wf.sets).encode()).hexdigest()[:16]


def steps_hash(wf: Workflow) -> str:
    """What shapes the outputs: each step's task, task version and parameters (not the executor)."""
    steps = [{"step": s.name, "task": s.task, "version": get_task(s.task).version,
              "params": s.params.model_dump(mode="json")} for s in wf.steps]
    return hashlib.sha256(json.dumps(steps, sort_keys=True).encode()).hexdigest()[:16]


def run_workflow(wf: Workflow, overwrite: bool = False, dry_run: bool = False,
                 only: list[str] | None = None, as_json: bool = False,
                 growing: Callable[[Any], Any] | None = None) -> list[StepReport]:
    """The steps of one workflow (a ``for_each`` workflow goes through foreach.run_for_each,
    which calls ``run_steps`` per dataset). A dry run sizes every step (sizing.py); a step whose
    run would stop on bad input makes it fail as the run would, after the table."""
    if dry_run:
        from .sizing import print_sizes, size_workflow

        if not as_json:
            print_steps(wf, only)
            print()
        sizes = size_workflow(wf, only)
        print_sizes(sizes, as_json)
        if not as_json:
            print_job_scripts(wf, only)  # last: each runs to the end of the output
        failed = next((s for s in sizes if s.error), None)
        if failed is not None:
            raise InputError(f"step {failed.step}: {failed.error}")
        return []
    if growing is None and wf.follow is not None:  # the workflow file's follow: block
        from ...ingest_follow import Follower, FollowSettings

        settings = FollowSettings(wf.follow.poll_seconds, wf.follow.settle_seconds, wf.follow.quiet_seconds)
        growing = lambda params: Follower(params, settings)  # noqa: E731
    check_worker_jobs(wf, only)  # a setting the cluster rejects is refused before any step writes
    with Executor(wf.executor, wf.name, run_dir_for(wf)) as executor:
        return run_steps(wf, executor, overwrite, only, growing=growing)


def print_steps(wf: Workflow, only: list[str] | None = None) -> None:
    """Each step of a dry run and its output."""
    for s in wf.steps:
        if not only or s.name in only:
            needs = f" (needs {', '.join(s.needs)})" if s.needs else ""
            print(f"{s.name}: {s.task} -> {s.params.ledger_root()}{needs}")


def print_job_scripts(wf: Workflow, only: list[str] | None = None) -> None:
    """On a batch scheduler, the worker job script of every pool (one per distinct step resources),
    not submitted."""
    from .jobqueue import render_job_script

    if wf.executor.kind not in BATCH_KINDS:
        return
    scripts: dict[tuple, list[str]] = {}
    for s in wf.steps:
        if not only or s.name in only:
            scripts.setdefault(s.resources.key() if s.resources else (), []).append(s.name)
    for key, names in scripts.items():
        resources = next(s.resources for s in wf.steps if s.name == names[0])
        print(f"\n# worker job script for {', '.join(names)} (not submitted)")
        print(render_job_script(wf.executor, wf.name, run_dir_for(wf), resources).rstrip())


def check_worker_jobs(wf: Workflow, only: list[str] | None = None) -> None:
    """On a batch scheduler, every pool's worker job script judged by the scheduler as the pool's
    start would judge it (its own check and the queue's limits), before any step plans or writes,
    and before ``zarrmill submit`` queues the driver."""
    from .jobqueue import render_job_script

    if wf.executor.kind not in BATCH_KINDS:
        return
    batch = scheduler(wf.executor.kind)
    seen: set[tuple] = set()
    for s in wf.steps:
        key = s.resources.key() if s.resources else ()
        if key not in seen and (not only or s.name in only):
            seen.add(key)
            batch.check_script(render_job_script(wf.executor, wf.name, run_dir_for(wf), s.resources),
                               f"the worker jobs of step {s.name}")


def run_dir_for(wf: Workflow) -> Path:
    # created by the executor only when a cluster needs it (sync and threads runs leave no folder)
    return Path(wf.executor.run_dir) if wf.executor.run_dir else default_run_dir(wf)


def run_steps(wf: Workflow, executor: Executor, overwrite: bool = False, only: list[str] | None = None,
              label: str = "", growing: Callable[[Any], Any] | None = None) -> list[StepReport]:
    """``growing(params)``: the first step's input is still being written (zarrmill follow): it is
    run once per poll by what ``growing`` returns (runtime/execution/engine.py)."""
    reports = []
    changed: set[str] = set()
    wf_info = {"name": wf.name, "file": str(Path(wf.source).resolve()) if Path(wf.source).is_file() else wf.source,
               "hash": workflow_hash(wf), "steps_hash": steps_hash(wf),
               **({"dataset": str(wf.dataset.path)} if wf.dataset else {})}
    for step in (s for s in wf.steps if not only or s.name in only):
        started = time.time()

        def provenance(name: str, task: str, params, owner: str | None, started: float = started,
                       root: Any = None) -> None:
            record_step(root or params.ledger_root(), wf_info, step_entry(
                name, task, params.model_dump(mode="json"), params.input_paths(), started), owner)

        opts = StepOptions(overwrite=overwrite, retries=wf.executor.retries, provenance=provenance,
                           upstream_changed=any(n in changed for n in step.needs),
                           explain_lost_workers=executor.explain_lost_workers, keep_pool=executor.keep_pool,
                           budget_setting=executor.budget_setting())
        if growing is not None and step is wf.steps[0]:
            opts.growing = growing(step.params)
        task = get_task(step.task)
        opts.unit_budget = lambda step=step, task=task: executor.unit_budget(step.resources, task.workers)
        try:
            run = partial(run_ozx_step, run_step) if ozx_target(step.params) else run_step
            report = run(step.name, task, step.params,
                         lambda plan, step=step, task=task: executor.client_for(step.resources, task.workers, plan), opts)
        finally:
            executor.step_done(step.resources, task.workers)
        if report.ran:
            changed.add(step.name)
        rate = report.bytes / 1e6 / report.unit_seconds if report.unit_seconds else 0.0
        print(f"{label}[{step.name}] done: {report.ran} units run, {report.skipped} skipped, "
              f"{report.bytes / 1e6:.1f} MB in {report.seconds:.1f}s (units {report.unit_seconds:.1f}s, "
              f"{rate:.0f} MB/s)", file=sys.stderr, flush=True)
        reports.append(report)
    return reports
