"""JSON Schema of workflow files and per-task parameter help, generated from the pydantic models
(never hand-written), so editors autocomplete and docs never drift from the code."""
from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model

from ... import __version__
from ..core.contract import Task
from ..execution.registry import get_task, task_names
from ..execution.spec import Resources, WorkflowSpec


# names this schema and its version; editors read the local file `zarrmill schema` writes (manual: Install and first run)
SCHEMA_ID = f"urn:zarrmill:workflow-schema:{__version__}"


def workflow_schema() -> dict[str, Any]:
    step_models = []
    for name in task_names():
        task = get_task(name)
        step_models.append(create_model(
            f"Step_{name}",
            __config__={"extra": "forbid"},
            __doc__=task.summary or name,
            task=(Literal[name], ...),
            params=(task.params_model, ...),
            needs=(list[str], Field(default_factory=list)),
            resources=(Resources | None, None),
        ))
    step_union = Annotated[Union[tuple(step_models)], Field(discriminator="task")]
    model = create_model("Workflow", __base__=WorkflowSpec, steps=(dict[str, step_union], ...))
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "zarrmill workflow"
    return schema


def task_params_help(task: Task) -> str:
    """Plain text: the task's documentation, then each parameter with its type, allowed values,
    bounds and default."""
    lines = [f"{task.name}: {plain(task.doc)}", "", "parameters:"]
    schema = task.params_model.model_json_schema()
    required = set(schema.get("required", []))
    defs = schema.get("$defs", {})
    for name, field in task.params_model.model_fields.items():
        prop = schema["properties"].get(name, {})
        kind = describe_type(prop, defs)
        if name in required:
            default = "required"
        else:
            value = field.get_default(call_default_factory=True)
            value = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
            default = f"default {json.dumps(value)}"
        lines.append(f"  {name}: {kind}; {default}")
        if field.description:
            lines.append(f"      {one_line(plain(field.description))}")
    return "\n".join(lines)


def task_help(task: Task) -> str:
    """What ``zarrmill task NAME --help`` and ``zarrmill tasks NAME`` print: how to call the task,
    its documentation, every parameter (type, bounds, default, description) and an example."""
    from ..execution.kinds import EXECUTOR_KINDS

    usage = (f"usage: zarrmill task {task.name} --set PARAM=VALUE ... [--params FILE] "
             f"[--executor {{{','.join(EXECUTOR_KINDS)}}}] [--set executor.KIND.SETTING=VALUE] [--overwrite]")
    lines = [usage, "", task_params_help(task), "", "example:", f"  {example_command(task)}"]
    example = module_example(task) or {}
    if example.get("sample"):
        lines.append(f"  (its input: zarrmill sample-data {' '.join(example['sample'])}, once per folder)")
    if example.get("after"):
        lines.append(f"  (its input is what the example of zarrmill task {example['after']} --help writes)")
    return "\n".join(lines)


def module_example(task: Task) -> dict[str, Any] | None:
    """The task module's ``EXAMPLE`` (``params``, optionally ``after`` and ``note``), if it has one."""
    import importlib

    from ..execution.registry import task_modules

    example = getattr(importlib.import_module(task_modules()[task.name].split(":")[0]), "EXAMPLE", None)
    return example if isinstance(example, dict) and isinstance(example.get("params"), dict) else None


def example_command(task: Task) -> str:
    """A command line for the task: its module's ``EXAMPLE`` parameters where it gives them (the
    manual's example), else every required parameter (placeholders in capitals)."""
    import shlex

    import yaml

    given = (module_example(task) or {}).get("params")
    words = ["zarrmill", "task", task.name]
    if given:
        for name, value in given.items():
            text = value if isinstance(value, str) and yaml.safe_load(value) == value else \
                json.dumps(value, separators=(",", ":"))
            words += ["--set", shlex.quote(f"{name}={text}")]
        return " ".join(words)
    schema = task.params_model.model_json_schema()
    for name in schema.get("required", []):
        words += ["--set", shlex.quote(f"{name}={_example_value(name, schema['properties'][name])}")]
    return " ".join(words)


def _example_value(name: str, prop: dict[str, Any]) -> str:
    if "default" in prop:
        return json.dumps(prop["default"], separators=(",", ":"))
    if prop.get("type") == "array" and prop.get("items", {}).get("type") in ("integer", "number"):
        low = prop["items"].get("minimum", 1)
        value = min(max(64, low), prop["items"].get("maximum", 64))
        return "[" + ",".join([str(value)] * max(prop.get("minItems", 1), 1)) + "]"
    if "enum" in prop:
        return str(prop["enum"][0])
    if prop.get("type") in ("integer", "number"):
        return str(prop.get("minimum", 1))
    return name.upper()


def one_line(text: str) -> str:
    """Whitespace (line breaks of a long description) as single spaces."""
    return " ".join(text.split())


def plain(text: str) -> str:
    """reStructuredText literals (``x``) as plain text for a terminal."""
    return re.sub(r"``([^`]+)``", r"\1", text)


def describe_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        target = defs.get(prop["$ref"].split("/")[-1], {})
        fields = ", ".join(f"{k} ({describe_type(v, defs)})" for k, v in target.get("properties", {}).items())
        return f"mapping with {fields}" if fields else "mapping"
    if "anyOf" in prop:
        kinds = [describe_type(p, defs) for p in prop["anyOf"] if p.get("type") != "null"]
        optional = any(p.get("type") == "null" for p in prop["anyOf"])
        return " or ".join(kinds) + (" (or null)" if optional else "")
    if "enum" in prop:
        return "one of " + ", ".join(str(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    kind = prop.get("type")
    if kind == "array":
        text = f"list of {describe_type(prop.get('items', {}), defs)}"
        lo, hi = prop.get("minItems"), prop.get("maxItems")
        if lo is not None and lo == hi:
            text += f", {lo} entries"
        elif lo is not None or hi is not None:
            text += f", {lo or 0} to {hi if hi is not None else 'any number of'} entries"
        return text
    if kind in ("integer", "number"):
        name = "whole number" if kind == "integer" else "number"
        bounds = [f"{op} {prop[key]}" for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                        ("maximum", "<="), ("exclusiveMaximum", "<")) if key in prop]
        return " ".join([name, *bounds]) if not bounds else f"{name} {' and '.join(bounds)}"
    if kind == "string":
        return "text" + (f" matching {prop['pattern']}" if "pattern" in prop else "")
    return {"boolean": "true or false", "object": "mapping"}.get(kind, kind or "any value")
