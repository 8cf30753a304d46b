"""The manual's reference pages, made from the code when the manual is built (docs/hooks.py): every
task with every parameter from the schema ``zarrmill schema`` prints, the workflow file format from
the same schema, and the ``--help`` of every command. Nothing here is written by hand, so a
parameter added to a task is in the manual at the next build, with no edit to the docs."""
from __future__ import annotations

import argparse
import json
from typing import Any

from .registry import get_task, task_names
from .schema import describe_type, plain, workflow_schema

TASKS_DIR = "reference/tasks"
GENERATED = "<!-- generated from the code at build time (tasks/runtime/manual.py): do not edit -->\n"


def reference_pages() -> dict[str, str]:
    """Site path -> Markdown, for every generated page."""
    schema = workflow_schema()
    pages = {f"{TASKS_DIR}/index.md": tasks_index(), "reference/workflow.md": workflow_page(schema),
             "reference/cli.md": cli_page()}
    for name in task_names():
        pages[f"{TASKS_DIR}/{name}.md"] = task_page(name, schema)
    return pages


def task_pages_nav() -> list[dict[str, str]]:
    """The task pages as MkDocs nav entries, in the order ``zarrmill tasks`` lists them."""
    return [{name: f"{TASKS_DIR}/{name}.md"} for name in task_names()]


def tasks_index() -> str:
    rows = [f"| [{name}]({name}.md) | {_cell(get_task(name).summary or '')} |" for name in task_names()]
    return (GENERATED + "# Tasks\n\nEvery task, with the parameters a workflow step or `zarrmill task NAME --set` "
            "takes. `zarrmill tasks NAME` prints the same in a terminal.\n\n| task | what it does |\n| --- | --- |\n"
            + "\n".join(rows) + "\n")


def task_page(name: str, schema: dict[str, Any]) -> str:
    task = get_task(name)
    defs = schema["$defs"]
    step = defs[f"Step_{name}"]
    params = defs[step["properties"]["params"]["$ref"].split("/")[-1]]
    required = set(params.get("required", []))
    doc, summary = _doc(task.doc), plain(task.summary or "")
    lead = [doc] if doc.startswith(summary) else [summary, "", doc]  # a docstring starts with its summary
    lines = [GENERATED, f"# {name}", "", *lead, "",
             "## Parameters", "", "| parameter | type and bounds | default | description |", "| --- | --- | --- | --- |"]
    for key, prop in params["properties"].items():
        default = "**required**" if key in required else f"`{json.dumps(prop.get('default'))}`"
        if key not in required and "default" not in prop:
            default = _factory_default(task, key)
        lines.append(f"| `{key}` | {_cell(describe_type(prop, defs))} | {default} | "
                     f"{_cell(plain(prop.get('description', '')))} |")
    lines += ["", "## As a workflow step", "", "```yaml", "steps:", f"  my-{name}:", f"    task: {name}",
              "    params:"]
    lines += [f"      {key}: ..." for key in params["properties"] if key in required] or ["      {}"]
    lines += ["```", "", f"Or from the command line: `zarrmill task {name} --set KEY=VALUE ...`; "
              f"`zarrmill tasks {name}` lists these parameters in a terminal.", ""]
    return "\n".join(lines)


def _factory_default(task: Any, key: str) -> str:
    value = task.params_model.model_fields[key].get_default(call_default_factory=True)
    value = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return f"`{json.dumps(value)}`"


def _doc(text: str) -> str:
    """A task's docstring as Markdown: reStructuredText literals become code."""
    return (text or "").replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def workflow_page(schema: dict[str, Any]) -> str:
    """The workflow file's top-level keys and every setting block, from the workflow schema."""
    defs = schema["$defs"]
    lines = [GENERATED, "# Workflow file reference", "",
             "The keys of a workflow file, from the JSON Schema `zarrmill schema` prints (editors that read "
             "it autocomplete and check these keys). The file's format is introduced in "
             "[Workflow files](workflow-files.md).", "", "## Top level", ""]
    lines += _table(schema, defs, skip={"steps"})
    lines += ["", "`steps`: a mapping of step names to steps; each step has `task` (one of the "
              "[tasks](tasks/index.md)), `params`, and optionally `needs` (steps that must finish first) "
              "and `resources` (below).", ""]
    for name in ("ExecutorSpec", "Resources", "ForEach", "StorageSpec", "Adapt", "Ready", "Codec"):
        if name in defs:
            lines += [f"## {_title(name)}", "", plain(defs[name].get("description", "")), ""]
            lines += _table(defs[name], defs) + [""]
    return "\n".join(lines)


def _title(name: str) -> str:
    return {"ExecutorSpec": "executor", "Resources": "resources (per step)", "ForEach": "for_each",
            "StorageSpec": "storage", "Adapt": "executor.adapt", "Ready": "for_each.ready",
            "Codec": "codec (task parameter)"}.get(name, name)


def _table(model: dict[str, Any], defs: dict[str, Any], skip: set[str] = frozenset()) -> list[str]:
    required = set(model.get("required", []))
    rows = ["| key | type and bounds | default | description |", "| --- | --- | --- | --- |"]
    for key, prop in model.get("properties", {}).items():
        if key in skip:
            continue
        default = "**required**" if key in required else (f"`{json.dumps(prop['default'])}`" if "default" in prop else "")
        rows.append(f"| `{key}` | {_cell(describe_type(prop, defs))} | {default} | {_cell(plain(prop.get('description', '')))} |")
    return rows


def cli_page() -> str:
    """``zarrmill --help`` and the ``--help`` of every command."""
    from .cli import build_parser

    parser = build_parser()
    lines = [GENERATED, "# Command line", "", "`zarrmill --help`:", "", "```text", _help(parser), "```", ""]
    for name, command in parser.get_default("commands").items():
        lines += [f"## zarrmill {name}", "", "```text", _help(command), "```", ""]
    return "\n".join(lines)


def _help(parser: argparse.ArgumentParser) -> str:
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: one width for the page
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
