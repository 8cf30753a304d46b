"""JSON Schema of workflow files and per-task parameter help, generated from the pydantic models
(never hand-written), so editors autocomplete and docs never drift from the code."""
from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model

from .. import __version__
from .contract import Task
from .registry import get_task, task_names
from .spec import Resources, WorkflowSpec


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
            lines.append(f"      {plain(field.description)}")
    return "\n".join(lines)


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
