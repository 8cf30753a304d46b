"""Resume or start over: whether a step's earlier record is this run's step, and what to do with
the output it left. A step is the same when its task, version and parameters are, except the
parameters that only say where its store and inputs are: the same store reached through another
mount, path or node resumes (inputs are compared by content, through their fingerprint)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, TYPE_CHECKING

from ...errors import OutputExistsError
from ...io.storage.guard import OutputGuard, remove_bookkeeping
from ...io.storage.guard_fs import walk
from ...io.storage.location import location_key
from .ledger import Ledger, StepRecord, diff_params, params_hash

if TYPE_CHECKING:
    from .contract import Task, TaskParams


def where_keys(p_json: dict[str, Any], places: list[Any]) -> set[str]:
    """Parameters whose value is the step's store or one of its inputs (a path or list of paths)."""
    named = {location_key(p) for p in places}

    def names_place(value: Any) -> bool:
        if isinstance(value, str):
            return location_key(value) in named
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) and location_key(v) in named
                                                               for v in value)
    return {k for k, v in p_json.items() if names_place(v)}


def step_record(task: "Task", params: "TaskParams", root: Any) -> StepRecord:
    p_json = params.model_dump(mode="json")
    keys = where_keys(p_json, [root, *params.input_paths()])
    kept = {k: v for k, v in p_json.items() if k not in keys}
    return StepRecord(task.name, p_json, params_hash(task.name, task.version, kept))


def same_step(task: "Task", old: StepRecord | None, rec: StepRecord, root: Any, inputs: list[Any]) -> bool:
    if old is None:
        return False
    if old.params_hash == rec.params_hash:
        return True
    # a record written before locations left the hash (2026-12): the same version, the same
    # parameters but for where the store and inputs are
    keys = where_keys(rec.params, [root, *inputs])
    return (old.params_hash == params_hash(task.name, task.version, old.params)
            and {k: v for k, v in old.params.items() if k not in keys} == {k: v for k, v in rec.params.items()
                                                                          if k not in keys})


def prepare_output(step: str, guard: OutputGuard, ledger: Ledger, old: StepRecord | None, rec: StepRecord,
                   same: bool, overwrite: bool, upstream_changed: bool) -> bool:
    """Decide between resuming and starting over; empty the step's own earlier output where that
    is allowed. Returns ``resume``: existing arrays of this step's parameters may be reused."""
    if same and not upstream_changed:
        return True
    if old is not None and not same and not overwrite:
        raise OutputExistsError(
            f"{guard.root}: step '{step}' was run here with other parameters "
            f"({diff_params(old.params, rec.params)}); rerun with --overwrite to replace it, "
            "or choose another output")
    if guard.in_place or not guard.owned() or not guard.has_content():
        ledger.reset()
        return False
    made_here = guard.owner().get("step") == step
    if overwrite or (made_here and (same or old is not None)):
        guard.clear()  # a store this step created, redone from scratch
        return False
    raise OutputExistsError(
        f"{guard.root}: holds a store zarrmill wrote for step '{guard.owner().get('step', '?')}', not this "
        "step's; rerun with --overwrite to replace it, or choose another output")


# temp files of a write a kill interrupted: zarrmill's and zarr's ``<name>.<uuid>.partial``,
# tensorstore's ``<chunk>.__lock`` (it writes a chunk or shard there, then renames it into place)
TEMP_SUFFIXES = (".partial", ".__lock")


def remove_partial_files(guard: OutputGuard) -> None:
    """An interrupted run can leave temp files (a chunk, shard or file being written when the
    process was killed); the units that wrote them are not done and rewrite their files, so the
    temp files are garbage. Only walked when resuming an interrupted step, and each goes through
    the guard: in a store zarrmill does not own (a step adding levels), only those under nodes it
    created; in the bookkeeping beside the store, zarrmill's own."""
    for dirpath, _, names in walk(guard.root):  # never through a link
        for name in names:
            path = Path(dirpath) / name
            if name.endswith(TEMP_SUFFIXES) and guard.may_replace(path):
                guard.remove(path)
    for dirpath, _, names in walk(guard.bookkeeping):
        for name in names:
            if name.endswith(TEMP_SUFFIXES):
                remove_bookkeeping(Path(dirpath) / name)


