"""JSON Schema of workflow files and per-task parameter help, generated from the pydantic models
(never hand-written), so editors autocomplete and docs never drift from the code."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model

from .contract import Task
from .registry import get_task, task_names
from .spec import Resources, WorkflowSpec


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
    schema["title"] = "zarrmill workflow"
    return schema


def task_params_help(task: Task) -> str:
    lines = [f"{task.name}: {task.doc}", "", "parameters:"]
    schema = task.params_model.model_json_schema()
    required = set(schema.get("required", []))
    for name, field in task.params_model.model_fields.items():
        kind = _type_name(field.annotation)
        default = "required" if name in required else f"default {field.get_default(call_default_factory=True)!r}"
        desc = field.description or ""
        lines.append(f"  {name:18s} {kind:28s} {default:24s} {desc}")
    return "\n".join(lines)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "")
