"""``zarrmill run --dry-run``: the size of each step before anything is asked of a cluster.

Each step is planned for real, with its output in a scratch folder (a step that adds to its input
plans on a copy of the input's metadata): its units, the bytes its input holds, the bytes its
arrays hold uncompressed, the memory its largest unit declares. A few units then run into the
scratch folder, timed, which gives worker-hours (mean seconds per unit x units) and the
compression ratio (bytes on disk / bytes written), so the bytes the output will take on disk. A
step whose input an earlier step makes is planned on that step's scratch output, finished there
(its metadata, from empty arrays), and says so. Nothing is written anywhere else; the scratch
folder is removed through the guards that claimed its outputs (each plan is never committed, so a
rollback removes what it made), then its emptied folders: a file someone else put there stays. The
real output is never touched."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ZarrmillError, warn
from ...io.storage.guard import OutputGuard, open_guard
from ...io.storage.paths import remove_empty_folder
from ...io.storage.location import as_location, on_disk
from ..core.contract import PlanContext, TaskParams
from .registry import get_task
from ..core.unit_stream import as_stream
from ..core.units import run_unit_of
from .workflow import Workflow

SAMPLE_UNITS = 3
METADATA_FILES = {"zarr.json", ".zattrs", ".zarray", ".zgroup"}


@dataclass
class StepSize:
    step: str
    task: str
    units: int | None = None
    input_bytes: int | None = None
    output_bytes: int | None = None  # the output's arrays, uncompressed
    disk_bytes: int | None = None  # estimated from the sample's compression
    unit_memory: int | None = None  # the largest unit's declared bytes
    worker_hours: float | None = None
    sampled: int = 0
    plan_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def size_workflow(wf: Workflow, only: list[str] | None = None) -> list[StepSize]:
    scratch = Path(tempfile.mkdtemp(prefix="zarrmill-dry-run-"))
    made: dict[str, tuple[str, Path]] = {}  # real output location -> (step, scratch output)
    guards: list[OutputGuard] = []
    try:
        return [_size_step(s, scratch / f"{i}", made, guards, later=_needed_later(wf, s.name))
                for i, s in enumerate(wf.steps) if not only or s.name in only]
    finally:
        _remove_scratch(scratch, guards)


def _remove_scratch(scratch: Path, guards: list[OutputGuard]) -> None:
    """Each scratch output through the guard that claimed it (newest first), then the folders the
    dry run made, only if empty: what someone else put there is left, and said."""
    for guard in reversed(guards):
        guard.rollback()
        guard.remove_made_folders()
    folders = sorted((Path(d) for d, _, _ in os.walk(scratch)), key=lambda d: len(d.parts), reverse=True)
    for folder in folders:
        if not remove_empty_folder(folder):
            warn(folder, "not empty after the dry run (something else wrote there); left as it is")
            return


def _in_place_field(params: Any) -> str:
    """The parameter that names the store an in-place step adds to (``input``; ``image`` for labels)."""
    root = str(params.ledger_root())
    for name in type(params).model_fields:
        value = getattr(params, name)
        if isinstance(value, str) and str(as_location(value)) == root:
            return name
    return "input"


def _same_place(value: str) -> str:
    """One spelling per place (``./out/p.zarr``, ``out/p.zarr`` and its absolute path are one): a step
    that reads what an earlier one writes finds it however the workflow spells it."""
    local = on_disk(as_location(value))
    return os.path.abspath(local) if isinstance(local, Path) else str(as_location(value))


def _needed_later(wf: Workflow, name: str) -> bool:
    return any(name in s.needs for s in wf.steps)


def _size_step(step: Any, scratch: Path, made: dict[str, tuple[str, Path]], guards: list[OutputGuard],
               later: bool) -> StepSize:
    task = get_task(step.task)
    size = StepSize(step.name, step.task)
    params = step.params
    update: dict[str, Any] = {}
    for name in type(params).model_fields:  # inputs an earlier step makes: its scratch output
        value = getattr(params, name)
        if isinstance(value, str) and _same_place(value) in made:
            earlier, path = made[_same_place(value)]
            update[name] = str(path)
            size.notes.append(f"{name} is made by step {earlier}: sized from that step's plan")
    from_earlier = bool(update) and not params.writes_in_place()
    missing = [str(p) for p in params.model_copy(update=update).input_paths()
               if (local := on_disk(p)) is not None and not Path(local).exists()]
    if missing:
        size.notes.append(f"not sized: its input {missing[0]} does not exist yet")
        return size
    out = scratch / "out"
    if params.writes_in_place():
        if on_disk(params.ledger_root()) is None:
            size.notes.append("not sized: it adds to a store in a bucket")
            return size
        scratch.mkdir()
        store_field = _in_place_field(params)  # the field naming the store it adds to: its copy takes its place
        guards.append(_copy_metadata(Path(update.get(store_field, params.ledger_root())), out, step.name))
        update[store_field] = str(out)
    else:
        scratch.mkdir()
        update["output"] = str(out)
    dry = params.model_copy(update=update)
    size.input_bytes = sum(_tree_bytes(p) for p in dry.input_paths() if on_disk(p) is not None and str(p) != str(out))
    t0 = time.monotonic()
    try:
        plan = _plan(task, dry, step.name, size, guards, from_earlier=from_earlier)
    except ZarrmillError as err:
        size.error = str(err)
        return size
    size.plan_seconds = time.monotonic() - t0
    total = plan.size()
    size.units, size.unit_memory = total.units, total.largest or None
    size.output_bytes, before = _arrays_bytes(out)
    _sample(task, dry, plan, out, before, size)
    if later and task.finish is not None:
        task.finish(dry, PlanContext(step=step.name, guard=guards[-1]))
        real = params.output_path() if not params.writes_in_place() else params.ledger_root()
        made[_same_place(str(real))] = (step.name, out)
    return size


def _plan(task: Any, params: TaskParams, step: str, size: StepSize, guards: list[OutputGuard],
          from_earlier: bool = False) -> Any:
    """The step's plan into the scratch output. What would stop the real run on its input (a plate
    with missing files) is said, and the step sized as if it went on (missing files as zeros). An
    input an earlier step makes was only planned (a few sample units): its missing files are the
    ones that step will write, so they are a note, not an error. The guard is kept, never
    committed: it removes the scratch output at the end."""
    guard = open_guard(params.ledger_root(), params.input_paths(), in_place=params.writes_in_place())
    guards.append(guard)
    guard.claim(step)
    problems: list[str] = []
    ctx = PlanContext(step=step, guard=guard, problems=problems)
    plan = as_stream(task.plan(params, ctx))
    ctx.create_nodes()
    if problems and from_earlier:
        size.notes.append("sized as if the earlier step had written all of its input (only its plan was made)")
    elif problems:
        size.error = problems[0]
        size.notes.append("sized as if it went on (missing files as zeros)")
    return plan


def _sample(task: Any, params: TaskParams, plan: Any, out: Path, disk_before: int, size: StepSize) -> None:
    """A few units of the first stage, run into the scratch output and timed."""
    stages = plan.stages()
    units = list(islice(plan.units(stages[0]), SAMPLE_UNITS)) if stages else []
    written, seconds = 0, 0.0
    for unit in units:
        t0 = time.monotonic()
        try:
            written += run_unit_of(task.run_unit, params, unit)
        except ZarrmillError as err:  # a unit the real run would also fail: no estimate from it
            size.notes.append(f"a sample unit failed ({err}): no time or bytes estimated")
            return
        seconds += time.monotonic() - t0
    size.sampled = len(units)
    if units:
        size.worker_hours = seconds / len(units) * len(plan) / 3600
    on_disk = _arrays_bytes(out)[1] - disk_before
    if written and size.output_bytes is not None:
        size.disk_bytes = int(size.output_bytes * on_disk / written)
    elif units:
        size.notes.append("the sample wrote nothing (missing files?): bytes on disk not estimated")


def _arrays_bytes(root: Path) -> tuple[int, int]:
    """(bytes of every array under ``root`` uncompressed, bytes of the files there)."""
    arrays = files = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            files += os.path.getsize(path)
            if name in ("zarr.json", ".zarray"):
                meta = json.loads(Path(path).read_bytes())
                if name == ".zarray" or meta.get("node_type") == "array":
                    dtype = meta.get("dtype") or meta.get("data_type")
                    arrays += math.prod(meta["shape"]) * np.dtype(dtype).itemsize
    return arrays, files


def _tree_bytes(path: Any) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _, names in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


def _copy_metadata(src: Path, dst: Path, step: str) -> OutputGuard:
    """The zarr metadata of ``src`` (no chunk) into a new store ``dst``, claimed and written through
    its own guard (returned: it removes the copy at the end): a store to plan an in-place step on."""
    guard = open_guard(dst, [src])
    guard.claim(step)
    for dirpath, dirnames, names in os.walk(src):
        dirnames[:] = [d for d in dirnames if d != ".zarrmill"]
        target = dst / os.path.relpath(dirpath, src)
        for name in names:
            if name in METADATA_FILES:
                guard.make_dirs(target)
                shutil.copyfile(os.path.join(dirpath, name), guard.will_create(target / name))
    return guard


def print_sizes(sizes: list[StepSize], as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(s) for s in sizes], indent=2))
        return
    rows = [("step", "task", "units", "reads", "writes", "on disk (est.)", "unit memory", "worker-hours")]
    for s in sizes:
        rows.append((s.step, s.task, _n(s.units), _gb(s.input_bytes), _gb(s.output_bytes), _gb(s.disk_bytes),
                     _gb(s.unit_memory), "?" if s.worker_hours is None else f"{s.worker_hours:.2f}"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    for s in sizes:
        for note in s.notes:
            print(f"{s.step}: {note}")
        if s.sampled:
            print(f"{s.step}: planned in {s.plan_seconds:.1f} s; {s.sampled} units run as a sample for the estimates")
        if s.error:
            print(f"{s.step}: the run would stop on its input (the error below)")


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)  # no thousands separator: scripts read it


def _gb(value: int | None) -> str:
    if value is None:
        return "?"
    return f"{value / 1e9:.2f} GB" if value >= 1e8 else f"{value / 1e6:.1f} MB"
