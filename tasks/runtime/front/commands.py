"""What each ``zarrmill`` command does, registered by name (the parser lives in cli.py, which\nimports this module; nothing here imports cli). A command imports what it needs when it runs, so
``zarrmill --version`` and ``zarrmill tasks`` answer without loading dask, zarr or the tasks."""
from __future__ import annotations

import argparse
import os
import json
import sys
from pathlib import Path

from typing import TYPE_CHECKING, Any, Callable

from ...errors import ConfigError, InputError, InputNotFoundError, did_you_mean
from ..execution.registry import get_task, task_names, task_summary

if TYPE_CHECKING:
    from ..execution.workflow import Workflow
    from ..core.yamlpos import Located

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str) -> Callable:
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable:
        COMMANDS[name] = fn
        return fn
    return register


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2))


def _with_executor(sets: list[str], executor: str | None) -> list[str]:
    return list(sets) + ([f"executor.kind={executor}"] if executor else [])


@command("run")
def cmd_run(args: argparse.Namespace) -> int:
    from ..execution.runner import run_workflow
    from ..execution.foreach import run_for_each
    from ..execution.workflow import load_workflow

    if args.json and not args.dry_run:
        raise ConfigError("--json prints a dry run's sizes: use it with --dry-run")
    wf = load_workflow(args.workflow, _with_executor(args.set, args.executor))
    names = [s.name for s in wf.steps]
    for name in args.step or []:  # a misspelt --step would run nothing, silently
        if name not in names:
            hint = did_you_mean(name, names)
            raise ConfigError(f"--step {name!r}: {args.workflow} has no such step; {hint + ' ' if hint else ''}"
                              f"steps: {', '.join(names)}")
    if wf.for_each is not None:  # the steps once per dataset found
        run_for_each(wf, overwrite=args.overwrite, dry_run=args.dry_run)
    else:
        run_workflow(wf, overwrite=args.overwrite, dry_run=args.dry_run, only=args.step, as_json=args.json)
    return 0


@command("validate")
def cmd_validate(args: argparse.Namespace) -> int:
    from ..execution.workflow import load_workflow

    wf = load_workflow(args.workflow, args.set)
    print(f"{args.workflow}: ok, {len(wf.steps)} steps: "
          + ", ".join(f"{s.name} ({s.task})" for s in wf.steps))
    return 0


@command("task")
def cmd_task(args: argparse.Namespace) -> int:
    from ..core.yamlpos import Located, load_located

    get_task(args.name)  # unknown task -> clear error before reading anything
    if args.params:
        doc = load_located(Path(args.params), "parameter file")
        if not isinstance(doc.data, dict):
            raise ConfigError(f"{args.params}: expected a mapping of parameter names to values")
    else:
        doc = Located({}, "--set", {})
    params = dict(doc.data)
    executor = apply_task_sets(params, args.set, args.executor)
    run_single_task(args.name, params, executor, args.overwrite, doc)
    return 0


def apply_task_sets(params: dict, sets: list[str], kind: str) -> dict:
    """``--set`` of ``zarrmill task`` and ``follow``: ``KEY=VALUE`` into the task's parameters,
    ``executor.KEY=VALUE`` into the executor mapping (returned), as a workflow file has them."""
    from ..execution.workflow import apply_set

    settings: dict = {"executor": {"kind": kind}}
    for item in sets:
        apply_set(settings if item.startswith("executor.") else params, item)
    return settings["executor"]


def run_single_task(name: str, params: dict, executor: str | dict, overwrite: bool,
                    doc: Located | None = None) -> None:
    """One task as a one-step workflow: same validation, ledger, resume and errors as a workflow."""
    from ..execution.runner import run_workflow

    run_workflow(single_task_workflow(name, params, executor, doc), overwrite=overwrite)


def single_task_workflow(name: str, params: dict, executor: str | dict, doc: Located | None = None) -> Workflow:
    """One task as a one-step workflow, validated as a workflow file is. ``executor``: a kind, or the
    workflow's ``executor`` mapping (``--set executor.KEY=VALUE`` on ``zarrmill task``)."""
    from ..execution.workflow import Workflow, build_workflow
    from ..core.yamlpos import Located

    doc = doc or Located({}, "command line", {})
    located = Located({"name": name, "executor": {"kind": executor} if isinstance(executor, str) else executor,
                       "steps": {name: {"task": name, "params": params}}},
                      doc.source, {("steps", name, "params") + k: v for k, v in doc.positions.items()})
    try:
        wf: Workflow = build_workflow(located)
    except ConfigError as err:  # the rest once this one is fixed (zarrmill validate takes workflow files)
        if len(err.problems) > 1:
            n = len(err.problems) - 1
            raise ConfigError(f"{err.problems[0]} (+{n} more problem{'s' if n > 1 else ''})", err.problems) from None
        raise
    return wf


@command("tune")
def cmd_tune(args: argparse.Namespace) -> int:
    try:
        patch = [int(x) for x in args.patch.split(",")]
    except ValueError:
        raise ConfigError(f"--patch {args.patch!r}: expected integers separated by commas, e.g. 128,128,128") from None
    params = {"input": args.input, "output": args.output, "patch": patch, "seconds": args.seconds,
              "processes": args.processes, "policy": args.policy}
    # inline: the measurements must not compete with worker processes for the CPU
    run_single_task("tune", params, "sync", args.overwrite)
    print(f"results: {Path(args.output) / 'tune.csv'}, {Path(args.output) / 'tune.png'}; "
          f"use: zarrmill task compress --params {Path(args.output) / 'recommended.yaml'} --set input=... --set output=...")
    return 0


@command("tasks")
def cmd_tasks(args: argparse.Namespace) -> int:
    if args.name:
        from .schema import task_help

        print(task_help(get_task(args.name)))
        return 0
    for name in task_names():
        print(f"{name:16s} {task_summary(name)}")
    return 0


@command("schema")
def cmd_schema(args: argparse.Namespace) -> int:
    from .schema import workflow_schema

    print_json(workflow_schema())
    return 0


@command("status")
def cmd_status(args: argparse.Namespace) -> int:
    from ..core.ledger import list_steps

    from ..execution.ozx_output import build_root, is_ozx

    output = Path(args.output)
    if is_ozx(output):  # an archive's ledger is its build store's (ozx_output.py); it may still be packing
        output = build_root(Path(os.path.abspath(output)))
    if not output.exists():
        raise InputNotFoundError(f"{args.output}: does not exist; give an output zarrmill wrote")
    steps = list_steps(output)
    if not steps:
        print(f"{args.output}: no zarrmill ledger here", file=sys.stderr)
        return 1
    print(f"{'step':20s} {'task':12s} {'state':9s} {'done/total':>14s}  params")
    for name, rec, done in steps:
        # following: zarrmill follow converts the wells as they are imaged (its latest poll's units)
        state = rec.state if rec.state in ("done", "following") else ("partial" if done else rec.state)
        shown = min(done, rec.n_units) if rec.state != "done" else rec.n_units
        print(f"{name:20s} {rec.task:12s} {state:9s} {shown:>6d}/{rec.n_units:<7d}  {rec.params_hash}")
    return 0


@command("submit")
def cmd_submit(args: argparse.Namespace) -> int:
    from ..execution.schedulers import BATCH_KINDS, DEFAULT_BATCH_KIND, scheduler
    from .submit import submit_workflow
    from ..execution.workflow import load_workflow

    wf = load_workflow(args.workflow, args.set)  # validate before anything is queued
    kind = args.scheduler or (wf.executor.kind if wf.executor.kind in BATCH_KINDS else DEFAULT_BATCH_KIND)
    _check_driver_job(kind, args.mem, args.time)
    given = args.sbatch_arg + args.directive
    # the driver runs where its workers do (partition, account) unless told otherwise
    settings = wf.executor.batch_settings() if wf.executor.kind == kind else {}
    directives = scheduler(kind).inherited_directives(settings, given) + given
    if not args.print_only:  # everything a run would refuse, refused before the driver is queued
        from ..execution.runner import check_worker_jobs

        check_worker_jobs(wf)
    job_id, script, log = submit_workflow(Path(args.workflow), args.set, args.time, args.mem, directives,
                                          Path(args.log_dir), args.print_only, args.overwrite, kind)
    if args.print_only:
        print(script)
    else:
        print(f"submitted driver job {job_id}; log: {log}")
        print(f"follow it with: {scheduler(kind).follow_hint(job_id)}; tail -f {log}")
    return 0


def _check_driver_job(kind: str, mem: str, time: str) -> None:
    """The driver job's --mem and --time, in forms the scheduler takes: one line now, not its refusal."""
    from ..execution.schedulers import scheduler
    from ..execution.spec import a_size

    try:
        a_size(mem)
    except ValueError as err:
        raise ConfigError(f"--mem: {err}") from None
    problem = scheduler(kind).walltime_problem(time)
    if problem:
        raise ConfigError(f"--time: {problem}")


@command("runs")
def cmd_runs(args: argparse.Namespace) -> int:
    import time

    from ..core.history import History
    from ..execution.foreach import state_dir
    from ..execution.workflow import load_workflow

    if args.prune:
        from ..core.rundirs import prune, runs_root

        removed = prune(args.days)
        print(f"removed {len(removed)} run folders older than {args.days:g} days from {runs_root()}")
        return 0
    if not args.workflow:
        raise ConfigError("zarrmill runs: give a for_each workflow file (or --prune)")
    wf = load_workflow(args.workflow, args.set, check_inputs=False)
    if wf.for_each is None:
        raise ConfigError(f"{args.workflow}: not a for_each workflow (no run history)")
    history = History(state_dir(wf))
    if args.retry:
        names = history.requeue_failed()
        print(f"re-queued {len(names)} failed datasets" + (f": {', '.join(names)}" if names else "")
              + f"; the next `zarrmill run {args.workflow}` converts them")
        return 0
    latest = {r.dataset: r for r in history.all()}
    rows = [r for r in latest.values() if r.status == "failed"] if args.failed else list(latest.values())
    print(f"{'dataset':28s} {'status':8s} {'started':19s} {'seconds':>8s} {'MB in':>8s} {'MB out':>8s}  error")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)) if r.started else "-"
        secs = f"{r.ended - r.started:.1f}" if r.started and r.ended else "-"
        mb_in = f"{r.bytes_in / 1e6:.1f}" if r.bytes_in else "-"
        mb_out = f"{r.bytes_out / 1e6:.1f}" if r.bytes_out else "-"
        print(f"{r.dataset:28s} {r.status:8s} {started:19s} {secs:>8s} {mb_in:>8s} {mb_out:>8s}  {r.error or ''}")
    return 0


def provenance_lines(prov: dict) -> list[str]:
    import time

    wf = prov.get("workflow", {})
    lines = [f"provenance: zarrmill {prov.get('zarrmill')} on {prov.get('host')}, workflow {wf.get('name')} "
             f"({wf.get('file')}, hash {wf.get('hash')})"]
    for name, step in prov.get("steps", {}).items():
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(step.get("ended", 0)))
        inputs = ", ".join(i["path"] for i in step.get("inputs", [])) or "-"
        lines.append(f"  step {name}: task {step.get('task')}, ended {when}, inputs {inputs}")
    return lines


def _not_a_store(store: Path, result: Any) -> bool:
    """Nothing there that check knows: no zarr metadata, no zarrmill kind, no zarrmill ledger."""
    from ..core.ledger import list_steps

    if result.kind != "zarr store" or result.checked:
        return False
    try:
        return not any((store / name).exists() for name in (".zattrs", ".zgroup", ".zarray", "zarr.json")) \
            and not list_steps(store)
    except OSError:
        return False


@command("check")
def cmd_check(args: argparse.Namespace) -> int:
    from ...io.storage.location import as_location, check_url, traits_of
    from .check import check_output
    from ..core.provenance import read_provenance

    check_url(args.store, write=False, what="store")
    if not traits_of(args.store).lists:
        raise ConfigError(f"{args.store}: check walks a store by listing it, and a web server lists nothing; "
                          "check a local copy or the s3:// location")
    store = as_location(args.store)
    if not store.exists():  # bad input, as everywhere: exit 2 (a store with problems is exit 1)
        raise InputNotFoundError(f"{args.store}: does not exist; give the path of a store (a .zarr folder, an .ozx "
                                 "file or an s3:// location)")
    result = check_output(store)
    if _not_a_store(store, result):
        raise InputError(f"{args.store}: not a store: no zarr.json, .zgroup or .zattrs here and no zarrmill output "
                         "(compressed set, patch store, tune results); give the store's own folder")
    prov = read_provenance(store)
    if args.json:
        print(json.dumps({"store": str(store), "kind": result.kind, "ok": not result.problems,
                          "checked": result.checked, "groups_checked": result.checked,
                          "problems": result.problems, "provenance": prov}, indent=2))
        return 1 if result.problems else 0
    if prov:
        for line in provenance_lines(prov):
            print(line)
    for line in result.problems:
        print(line)
    if result.problems:
        print(f"{args.store}: {result.kind}: {len(result.problems)} problems", file=sys.stderr)
        return 1
    print(f"{args.store}: ok ({result.summary})")
    return 0
