"""Read a workflow file into validated steps, reporting every problem as file:line:col before any
work starts: YAML syntax, unknown task or field, wrong types, unresolved ``${var}``, missing
``needs`` targets, cycles, missing input paths."""
from __future__ import annotations

import copy
import errno
import json
import os
import re
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ...errors import ConfigError, InputError, InputNotFoundError, did_you_mean
from ..core.contract import TaskParams
from ..core.datasets import Dataset
from ...io.storage.ozx_path import OzxPath
from .ozx_output import ozx_target
from ...io.storage.location import apply_storage_block, location_key, on_disk
from .registry import get_task
from .spec import ExecutorSpec, FollowSpec, ForEach, Resources, WorkflowSpec
from ..core.variables import resolve_vars, substitute
from ..core.yamlpos import Located, load_located, loads_located


@dataclass
class Step:
    name: str
    task: str
    params: TaskParams
    needs: list[str]
    resources: Resources | None


@dataclass
class Workflow:
    name: str
    source: str
    executor: ExecutorSpec
    steps: list[Step]  # in dependency order
    for_each: ForEach | None = None
    doc: Located | None = None  # kept to build one workflow per dataset
    sets: tuple[str, ...] = ()
    dataset: Dataset | None = None
    follow: FollowSpec | None = None  # the first step follows a growing acquisition

    def for_dataset(self, ds: Dataset) -> "Workflow":
        """The same workflow with ${<for_each.name>.*} bound to one dataset."""
        return build_workflow(self.doc, self.sets, check_inputs=True, dataset=ds)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


def load_workflow(path: str | Path, sets: list[str] = (), check_inputs: bool = True) -> Workflow:
    doc = load_located(Path(path))
    return build_workflow(doc, sets, check_inputs)


def loads_workflow(text: str, source: str = "<string>", sets: list[str] = (),
                   check_inputs: bool = True) -> Workflow:
    return build_workflow(loads_located(text, source), sets, check_inputs)


def build_workflow(doc: Located, sets: list[str] = (), check_inputs: bool = True,
                   dataset: Dataset | None = None) -> Workflow:
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{doc.source}:1:1: a workflow file must be a mapping with name and steps")
    data_in = copy.deepcopy(doc.data)
    for item in sets:
        apply_set(data_in, item)
    _refuse_sets_of_missing_steps(doc, data_in, sets)
    where = lambda loc: doc.where(loc)  # noqa: E731
    scope = resolve_vars(_as_dict(data_in.get("vars")), where)
    body = {k: v for k, v in data_in.items() if k not in ("vars", "for_each", "steps")}
    data = substitute(body, scope, where) | {"vars": scope}
    for_each = None
    if data_in.get("for_each") is not None:
        raw = substitute({"for_each": data_in["for_each"]}, scope, where)["for_each"]
        for_each = validate_model(ForEach, raw, doc, ("for_each",))
        if not (for_each.glob or for_each.list):
            raise ConfigError(f"{doc.where(('for_each',))}: for_each: give glob or list")
        bound = dataset or _placeholder(for_each)
        scope = {**scope, for_each.name: bound.scope()}
        check_inputs = check_inputs and dataset is not None
    data["steps"] = substitute({"steps": data_in.get("steps")}, scope, where)["steps"]
    spec = validate_model(WorkflowSpec, data, doc, ())
    if spec.storage is not None:  # before any step's URL is looked at
        apply_storage_block(spec.storage.model_dump(exclude_none=True))
    _refuse_secrets(data, doc)
    steps, problems = {}, []
    for name, s in spec.steps.items():  # every step's problems, not only the first step's
        try:
            steps[name] = _build_step(name, s, doc)
        except ConfigError as err:
            problems += err.problems
    if problems:
        raise ConfigError.of(problems)
    order = _dependency_order(steps, doc)
    ordered = [steps[n] for n in order]
    _check_outputs(ordered, doc)
    if check_inputs:
        _check_inputs(ordered, doc)
    if spec.follow is not None and (for_each is not None or ordered[0].task != "ingest"):
        raise ConfigError(f"{doc.where(('follow',))}: follow is for a workflow whose first step is an ingest, "
                          "without for_each (one acquisition per follower)")
    return Workflow(spec.name, doc.source, spec.executor, ordered, for_each, doc, tuple(sets), dataset, spec.follow)


def _refuse_sets_of_missing_steps(doc: Located, data: dict[str, Any], sets: list[str]) -> None:
    """``--set steps.S.params.X=..`` for a step S the file does not have (a typo) would add a step
    without a task: said as the step name it missed, with the closest one."""
    have = doc.data.get("steps") if isinstance(doc.data.get("steps"), dict) else {}
    steps = data.get("steps") if isinstance(data.get("steps"), dict) else {}
    for item in sets:
        parts = item.partition("=")[0].split(".")
        if len(parts) > 2 and parts[0] == "steps" and parts[1] not in have:
            added = steps.get(parts[1])
            if isinstance(added, dict) and "task" not in added:
                hint = did_you_mean(parts[1], have)
                raise ConfigError(f"--set {item.partition('=')[0]}: {doc.source} has no step {parts[1]!r}; "
                                  f"{hint + ' ' if hint else ''}steps: {', '.join(map(str, have)) or 'none'}")


def _refuse_secrets(data: dict[str, Any], doc: Located) -> None:
    """A credential in a URL in the workflow's name, description, variables or executor settings
    would name run folders and jobs and land in job scripts and provenance: one line naming the
    place (step parameters are checked by their task, storage.endpoint by apply_storage_block)."""
    from ...io.storage.secrets import refuse_secret_url

    for key, value in data.items():
        if key not in ("steps", "storage"):
            try:
                refuse_secret_url(json.dumps(value, default=str), key)
            except ConfigError as err:
                raise ConfigError(f"{doc.where((key,))}: {err}") from None


def _placeholder(for_each: ForEach) -> Dataset:
    """Stands in for a dataset when validating a for_each workflow without one."""
    base = Path(for_each.glob).parent if for_each.glob else Path(for_each.list or ".").parent
    return Dataset("DATASET", base / "DATASET")


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _build_step(name: str, spec: Any, doc: Located) -> Step:
    loc = ("steps", name)
    try:
        task = get_task(spec.task)
    except ConfigError as err:
        raise ConfigError(f"{doc.where(loc + ('task',))}: steps.{name}.task: {err}") from None
    params = validate_model(task.params_model, spec.params, doc, loc + ("params",))
    return Step(name, spec.task, params, list(spec.needs), spec.resources)


def validate_model(model: type[BaseModel], data: Any, doc: Located, prefix: tuple) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError.of(validation_problems(err, model, doc, prefix)) from None


# errors of one number or flag: the line adds the value given and a good one
SCALAR_ERRORS = frozenset({"int_parsing", "int_type", "int_from_float", "float_parsing", "float_type", "finite_number",
                           "greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of",
                           "bool_parsing", "bool_type"})


def validation_problems(err: ValidationError, model: type[BaseModel], doc: Located, prefix: tuple) -> list[str]:
    """Every problem as one line (file:line:col: field: what is wrong, what is allowed). An unknown
    field names the closest allowed one and comes first: a misspelt key is why the one it meant is
    "missing" (or, for ``stpes:``, why ``steps`` is no mapping)."""
    lines = []
    for error in sorted(err.errors(), key=lambda e: {"extra_forbidden": 0, "missing": 2}.get(e["type"], 1)):
        loc = prefix + tuple(error["loc"])
        msg = error["msg"]
        cause = error.get("ctx", {}).get("error")
        if error["type"] == "extra_forbidden":
            allowed = _allowed_fields(model, error["loc"])
            hint = did_you_mean(error["loc"][-1], allowed) if error["loc"] else ""
            msg = f"unknown field; {hint + ' ' if hint else ''}allowed: {', '.join(allowed)}"
        elif error["type"] == "missing":
            msg = "required field is missing"
        elif error["type"] in ("literal_error", "enum"):
            hint = did_you_mean(error.get("input"), re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", ""))))
            msg += f"; {hint}" if hint else ""
        elif error["type"] == "value_error" and isinstance(cause, Exception):
            msg = str(cause)  # the validator's own words, without pydantic's "Value error, "
            loc += getattr(cause, "loc", ())  # SettingError: the key inside the field
        elif error["type"] in SCALAR_ERRORS:
            msg += _given_and_example(model, error["loc"], error.get("input"))
        field = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"{doc.where(loc)}: {field}: {msg}")
    return lines


def _given_and_example(model: type[BaseModel], loc: tuple, given: Any) -> str:
    """`` (got 'lots'; e.g. 64)``: the value given and the field's default (or bound) as a good one."""
    text = repr(given) if len(repr(given)) <= 40 else repr(given)[:37] + "..."
    field = _field_at(model, loc)
    example = None
    if field is not None:
        default = field.get_default(call_default_factory=True) if not field.is_required() else None
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            example = default
        else:
            for bound in field.metadata:
                low = getattr(bound, "ge", None)
                low = low if low is not None else getattr(bound, "gt", None)
                if isinstance(low, (int, float)):
                    example = low if getattr(bound, "ge", None) is not None else low + 1
    if example is None:
        return f" (got {text})"
    shown = int(example) if isinstance(example, float) and example.is_integer() else example
    unit = "a number of megabytes, " if str(loc[-1]).endswith("_mb") else ""
    return f" (got {text}; {unit}e.g. {shown})"


def _field_at(model: type[BaseModel], loc: tuple) -> Any:
    """The pydantic field a location names (None for a list entry or a dict value)."""
    current: Any = model
    field = None
    for part in loc:
        fields = getattr(current, "model_fields", {})
        if part not in fields:
            field = None  # a dict key (a step name) or a list index: the same model goes on
            continue
        field = fields[part]
        current = _model_in(field.annotation)
    return field


def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", {})
        if part in fields:  # otherwise a dict key (a step name) or list index: same model
            current = _model_in(fields[part].annotation)
        if current is None:
            return ["see zarrmill schema"]
    return list(getattr(current, "model_fields", {})) or ["see zarrmill schema"]


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside ``X``, ``X | None`` or ``dict[str, X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _dependency_order(steps: dict[str, Step], doc: Located) -> list[str]:
    for step in steps.values():
        if not STEP_NAME.fullmatch(str(step.name)):  # it names folders in each output's ledger
            raise ConfigError(f"{doc.where(('steps', step.name))}: steps: step name {step.name!r} must be letters, "
                              "digits, '_' or '-' (at most 64, starting with a letter or digit)")
        for i, dep in enumerate(step.needs):
            if dep not in steps:
                hint = did_you_mean(dep, steps)
                raise ConfigError(f"{doc.where(('steps', step.name, 'needs', i))}: steps.{step.name}"
                                  f".needs: no step named {dep!r}; {hint + ' ' if hint else ''}steps: {', '.join(steps)}")
    # Declaration order breaks ties, so runs are predictable.
    sorter = TopologicalSorter({name: s.needs for name, s in steps.items()})
    try:
        sorter.prepare()
    except CycleError as err:
        cycle = " -> ".join(err.args[1])
        first = err.args[1][0]
        raise ConfigError(f"{doc.where(('steps', first, 'needs'))}: steps.{first}.needs: "
                          f"dependency cycle {cycle}; remove one of these needs") from None
    order: list[str] = []
    rank = {name: i for i, name in enumerate(steps)}
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=rank.__getitem__)
        order.extend(ready)
        sorter.done(*ready)
    return order


def _ancestors(name: str, steps: dict[str, Step]) -> set[str]:
    seen: set[str] = set()
    stack = list(steps[name].needs)
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(steps[dep].needs)
    return seen


def _check_outputs(ordered: list[Step], doc: Located) -> None:
    """Two steps that create the same output would each take the other's store for a stranger's
    (or replace it with --overwrite); steps that add to a store in place (pyramid) may share it."""
    creators: dict[str, str] = {}
    for step in ordered:
        try:
            ozx_target(step.params)  # an .ozx that cannot be written: said before any step runs
        except ConfigError as err:
            raise ConfigError(f"{doc.where(('steps', step.name, 'params'))}: {err}") from None
        out = step.params.output_path()
        if out is None or step.params.writes_in_place():
            continue
        key = location_key(out)
        if key in creators:
            raise ConfigError(f"{doc.where(('steps', step.name, 'params', 'output'))}: steps {creators[key]} and "
                              f"{step.name} both write {out}; give each step its own output")
        creators[key] = step.name


def _refuse_link_loop(path: Path) -> None:
    """A link that leads nowhere is 'does not exist'; one that leads back to itself says so (Python
    3.11/3.12 raise from resolve(), 3.13 does not)."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{path}: the path runs through a symlink loop; fix or remove the link") from None


def _check_inputs(ordered: list[Step], doc: Located) -> None:
    by_name = {s.name: s for s in ordered}
    for step in ordered:
        produced_at = [by_name[a].params.output_path() for a in _ancestors(step.name, by_name)]
        produced = [p.resolve() for p in produced_at if p is not None and on_disk(p) is not None]
        produced_urls = [location_key(p) for p in produced_at if p is not None and on_disk(p) is None]
        for path in step.params.input_paths():
            if on_disk(path) is None:
                key = location_key(path)
                if any(key == u or key.startswith(u + "/") for u in produced_urls) or _remote_exists(path):
                    continue
                raise InputNotFoundError(f"{doc.where(('steps', step.name, 'params', 'input'))}: steps.{step.name}."
                                         f"params.input: {path} does not exist (and no earlier step in needs writes it)")
            if isinstance(path, OzxPath) and path.exists():  # inside an .ozx archive that exists
                continue
            resolved = Path(os.path.abspath(path))
            if os.path.lexists(resolved) and not os.path.exists(resolved):
                _refuse_link_loop(resolved)
            resolved = resolved.resolve()
            if resolved.exists() or any(resolved == p or p in resolved.parents for p in produced):
                continue
            raise InputNotFoundError(
                f"{doc.where(('steps', step.name, 'params', 'input'))}: steps.{step.name}.params."
                f"input: {path} does not exist (and no earlier step in needs writes it)")


def _remote_exists(path: Any) -> bool:
    """An object or a prefix with objects; an unreachable server or refused credentials are one line."""
    from ...io.storage.object_store import describe_access_error

    try:
        return bool(path.exists())
    except Exception as err:  # noqa: BLE001 - every client error becomes one line
        raise ConfigError(describe_access_error(path, err)) from None


def apply_set(data: dict[str, Any], item: str) -> None:
    """``--set a.b.c=value``: the value is parsed as YAML (numbers, lists, booleans), or taken as
    a plain string when it is not valid YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set executor.workers=4")
    key, _, raw = item.partition("=")
    if not key or any(part == "" for part in key.split(".")):
        raise ConfigError(f"--set {item!r}: the key before '=' is empty or has an empty part; "
                          "expected KEY=VALUE, e.g. --set executor.workers=4")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw  # e.g. a filename pattern with {braces}: a plain string
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value
