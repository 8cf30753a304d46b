"""The task contract.

A task is a module with:

- ``Params``: a :class:`TaskParams` subclass (pydantic, ``extra="forbid"``, typed, bounded, described);
- ``plan(params, ctx) -> list[Unit]``: on the driver, cheap. Reads input metadata, validates it,
  declares the output skeleton (appends ``GroupNode`` / ``ArrayNode`` of
  ``zarrmill.io.storage.nodes`` to ``ctx.nodes``, parents first: the engine creates them through
  the output guard once the plan is whole and fits the workers' budget; a plan that must write into
  a node while planning creates it at once with ``ensure_group`` / ``ensure_array``), returns
  units: instances of the task's own frozen dataclasses on :class:`TypedUnit` (units.py: a
  unique ``id``, a ``stage``: all units of a stage finish before the next stage starts, the
  ``memory`` it holds), or JSON-able dicts with those keys. What
  ``finish`` needs of what ``plan`` read goes in ``ctx.carried``, never in a module's globals. A
  plan may place another task's units in its stages (a :class:`~.units.PlacedUnit`, such as the
  pyramid's ``LevelUnit``, carries its store's root): the engine runs those as they are;
- ``run_unit(params, unit) -> int | None``: on a worker. Reads a region and writes whole output
  chunks/shards that no other unit writes; idempotent. Returns the bytes it wrote (for MB/s);
- optional ``finish(params, ctx)``: on the driver, after every unit is done (final metadata);
- optional ``describe_unit(unit) -> str``: a short human description for error messages;
- optional ``VERSION: int``: bump when the output of the same parameters changes, so old ledgers
  are not trusted;
- optional ``WORKERS = THREADS``: its units spend their time outside the GIL (file reads, numpy,
  Blosc), so the local executor runs them on threads in one process;
- optional ``EXAMPLE``: ``{"params": {...}}`` with parameters that run as they are (optionally
  ``"after"``: the task whose example writes this one's input, ``"sample"``: ``[NAME, DEST]`` of
  the ``zarrmill sample-data`` that writes it, and ``"note"``: what else it reads); the manual
  shows it as a workflow file and a command line.

The module docstring is the task's user documentation (``zarrmill tasks NAME``).
"""
from __future__ import annotations

import json
import types
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...errors import ConfigError
from ...io.storage.guard import OutputGuard
from ...io.storage.location import as_location, check_url, scheme_of

if TYPE_CHECKING:
    from ...io.storage.nodes import Node

from .units import TypedUnit, Unit, fields_of  # noqa: F401 - the contract's unit types
# A task module sets ``WORKERS = THREADS`` when its units spend their time in code that releases
# the GIL (file reads, numpy, Blosc): the local executor then runs it on threads in one process,
# with no process start-up or transfers (bench_ingest at camera size: 6.6 s vs 7.9 s on 2 processes).
THREADS = "threads"
# Every number a user sets has a lower and an upper bound, which pydantic's message states
# (unit_mb=1e308 once ended in an OverflowError; tests/test_param_bounds.py checks every task).
MAX_INDEX = 2**31 - 1      # sizes, shapes, chunks, pixel counts
MAX_COUNT = 10**9          # patches, blobs, cases, fields
MAX_MB = 1_048_576.0       # 1 TiB: memory and file-size budgets
MAX_UM = 1e9               # 1 km in micrometer: physical sizes and positions
MAX_SEED = 2**32 - 1
MAX_LEVEL = 32             # pyramid levels (2**32 downsampling)
# sizes, shapes, chunks: every entry at least 1 (0 or negative ended in tracebacks deep in zarr)
PositiveInt = Annotated[int, Field(ge=1, le=MAX_INDEX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_INDEX)]
# physical sizes (pixel and voxel sizes, micrometer): a 0 gave a silently degenerate scale
PositiveFloat = Annotated[float, Field(gt=0, le=MAX_UM)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, description="random seed")]
# plate rows, columns: up to 3456-well plates (48 x 72); rows are named A..Z, AA..AV
PlateShape = Annotated[list[Annotated[int, Field(ge=1, le=72)]], Field(min_length=2, max_length=2)]


class TaskParams(BaseModel):
    """Base of every task's parameters: unknown keys are errors, values are validated on assignment."""

    # NaN and infinity are never a size, a position or a pixel size
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
    # the task reads and writes object stores (s3://, and https:// inputs); the others refuse URLs
    OBJECT_STORES: ClassVar[bool] = False
    # fields that name a local folder or file, never a URL, and the reason a user is told
    LOCAL_FIELDS: ClassVar[tuple[str, ...]] = ()
    LOCAL_WHY: ClassVar[str] = "instrument folders and files are read from local paths"
    # fields that name a store or file: (name, written to)
    URL_FIELDS: ClassVar[tuple[tuple[str, bool], ...]] = (("input", False), ("output", True))

    @model_validator(mode="after")
    def _check_urls(self) -> "TaskParams":
        """A URL of a scheme zarrmill cannot serve, or any URL for a task that works on local paths
        only, is one line (a URL must never become a local folder named ``s3:``)."""
        task = type(self).__module__.rsplit(".", 1)[-1].removesuffix("_params").replace("_", "-")
        for field, write in self.URL_FIELDS:
            value = getattr(self, field, None)
            for v in (value if isinstance(value, list) else [value]) if value is not None else []:
                check_url(str(v), write=write, what=field)
                if scheme_of(str(v)) and (not self.OBJECT_STORES or field in self.LOCAL_FIELDS):
                    where = self.LOCAL_WHY if self.OBJECT_STORES else f"task {task} reads and writes local paths only"
                    raise ConfigError(f"{v}: {field} is a URL; {where}")
        from ...io.storage.secrets import refuse_secret_url

        # a credential in any other text (a name, a label, a pattern) would be stored with the
        # parameters in the ledger and the provenance: refused like one in a path
        for field, value in self.model_dump(mode="json").items():
            refuse_secret_url(json.dumps(value), field)
        return self

    def input_paths(self) -> list[Path]:
        """Paths that must exist before the step runs (unless an earlier step writes them)."""
        value = getattr(self, "input", None)
        if value is None:
            return []
        return [as_location(v) for v in value] if isinstance(value, list) else [as_location(value)]

    def output_path(self) -> Path | None:
        """Where the step writes; its ledger lives there too."""
        value = getattr(self, "output", None)
        return as_location(value) if value is not None else None

    def ledger_root(self) -> Path:
        """The store the ledger is kept in; tasks that add to their input override this."""
        out = self.output_path()
        if out is None:
            raise NotImplementedError(f"{type(self).__name__} has no output; override ledger_root()")
        return out

    def writes_in_place(self) -> bool:
        """The step adds to its input store (pyramid levels, a well image) instead of writing a
        new output; tasks that do so say so here. Any other task whose output is an input is refused."""
        return False


@dataclass(frozen=True)
class PlanContext:
    """What the engine tells ``plan``/``finish``.

    step: the step's name in the workflow. nodes: the groups and arrays the plan declares, in
    the order they are to be created (``create_nodes`` is the engine's call, after the plan).
    resume: the ledger already holds this step with the same parameters, so existing output
    arrays must be kept (open, never recreate). overwrite: the user
    asked to replace an existing output. guard: the output guard every node the plan creates or
    replaces goes through (never delete or replace anything by hand). saved: what an earlier plan of
    the same step read, kept for a resume. problems: on a dry run, a list to which a task adds what
    would stop the real run (e.g. missing files) before it goes on planning; None on a real run.
    """

    step: str
    resume: bool = False
    overwrite: bool = False
    guard: OutputGuard | None = None  # every node the plan creates or replaces goes through it
    saved: Any = None  # runtime/core/saved_plan.SavedPlan: what this plan read, kept for a resume
    # a dry run (runtime/execution/sizing.py): a task may list here what would stop the real run on its input
    # (e.g. missing files) and go on planning, so the job is still sized
    problems: list[str] | None = None
    # zarrmill follow (ingest_follow.Follower): an input still being written; the plan converts
    # ``growing.acquisition`` (what is ready) and versions its units with ``growing.versioned``
    growing: Any = None
    # what ``plan`` read that ``finish`` needs again (ingest's acquisition), by the task's own key:
    # the step keeps one context from plan to finish, so nothing lives in a module between them
    carried: dict[str, Any] = dataclass_field(default_factory=dict)
    # the output's groups and arrays the plan declares (io/storage/nodes.py), in the order they are
    # created: by the step once the plan is valid and fits the budget (create_nodes)
    nodes: list[Node] = dataclass_field(default_factory=list)

    def create_nodes(self) -> None:
        """Create the nodes the plan declared, in order, through the output guard. The engine calls
        it once the plan is whole and fits the budget; a plan calling it would write before then."""
        from ...io.storage.nodes import create_nodes

        nodes = list(self.nodes)
        self.nodes.clear()
        create_nodes(nodes, self)


@dataclass(frozen=True)
class Task:
    """A task as the runtime sees it, made from its module by ``Task.from_module`` (the registry
    does so for the built-in tasks and every module a ``zarrmill.tasks`` entry point names): the
    module's ``Params``, ``plan``, ``run_unit``, optional ``finish`` and ``describe_unit``, ``VERSION``,
    ``WORKERS`` and docstring (``doc``, whose first line is ``summary``)."""

    name: str
    params_model: type[TaskParams]
    plan: Callable[[TaskParams, PlanContext], list[Unit]]
    run_unit: Callable[[TaskParams, Unit], int | None]
    finish: Callable[[TaskParams, PlanContext], None] | None
    describe_unit: Callable[[Unit], str]
    version: int
    doc: str
    # "threads" where units spend their time in code that releases the GIL (Blosc, numpy, file
    # reads): the local executor then runs them on threads in one process (Executor.client_for)
    workers: str = "processes"

    @classmethod
    def from_module(cls, name: str, module: types.ModuleType) -> "Task":
        """The task a module defines, under ``name``; ``TypeError`` when it lacks ``Params``, ``plan``
        or ``run_unit``."""
        missing = [a for a in ("Params", "plan", "run_unit") if not hasattr(module, a)]
        if missing:
            raise TypeError(f"task module {module.__name__} lacks {', '.join(missing)}")
        return cls(
            name=name,
            params_model=module.Params,
            plan=module.plan,
            run_unit=module.run_unit,
            finish=getattr(module, "finish", None),
            describe_unit=getattr(module, "describe_unit", _default_describe),
            version=int(getattr(module, "VERSION", 1)),
            doc=(module.__doc__ or "").strip(),
            workers=getattr(module, "WORKERS", "processes"),
        )

    @property
    def summary(self) -> str:
        """The docstring's first line."""
        return self.doc.splitlines()[0] if self.doc else ""


def _default_describe(unit: Unit) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields_of(unit).items() if k not in ("id", "type"))
