"""The manual's reference pages, made from the code when the manual is built (docs/hooks.py): every
task with every parameter from the schema ``zarrmill schema`` prints and the example its module
gives (``EXAMPLE``), the workflow file format from the same schema, the ``--help`` of every command,
and the Python API (patch stores, the task contract) from signatures and docstrings. Nothing here is
written by hand, so a parameter added to a task is in the manual at the next build, with no edit to
the docs."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import re
import shlex
from typing import Any

import yaml

from ..execution.registry import get_task, task_modules, task_names
from .schema import describe_type, plain, workflow_schema

TASKS_DIR = "reference/tasks"
API_DIR = "reference/api"
GENERATED = "<!-- generated from the code at build time (tasks/runtime/front/manual.py): do not edit -->\n"


def reference_pages() -> dict[str, str]:
    """Site path -> Markdown, for every generated page."""
    schema = workflow_schema()
    pages = {f"{TASKS_DIR}/index.md": tasks_index(), "reference/workflow.md": workflow_page(schema),
             "reference/cli.md": cli_page()}
    for name in task_names():
        pages[f"{TASKS_DIR}/{name}.md"] = task_page(name, schema)
    pages.update(api_pages())
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
    lines += ["", *example_section(name), f"`zarrmill tasks {name}` lists these parameters in a terminal.", ""]
    return "\n".join(lines)


def task_example(name: str) -> dict[str, Any] | None:
    """The task module's ``EXAMPLE``: ``params`` (a runnable set of parameters), optionally ``after``
    (the task whose example writes this one's input), ``sample`` (``[NAME, DEST]``: the ``zarrmill
    sample-data`` that writes it) and ``note`` (what else it reads)."""
    module = importlib.import_module(task_modules()[name].split(":")[0])
    example = getattr(module, "EXAMPLE", None)
    return example if isinstance(example, dict) and isinstance(example.get("params"), dict) else None


def example_workflow(name: str, params: dict[str, Any]) -> str:
    """The example as a workflow file of one step."""
    doc = {"name": f"{name}-example", "steps": {name: {"task": name, "params": params}}}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def example_command(name: str, params: dict[str, Any]) -> str:
    """The example as ``zarrmill task NAME --set KEY=VALUE ...`` (values as ``--set`` reads them)."""
    words = ["zarrmill", "task", name]
    for key, value in params.items():
        words += ["--set", shlex.quote(f"{key}={_set_value(value)}")]
    return " ".join(words)


def _set_value(value: Any) -> str:
    """YAML that reads back as ``value``, compact: ``[B03,C05]``, ``{cname: lz4}``, ``true``."""
    if isinstance(value, list):
        return "[" + ",".join(_set_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_set_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and not re.search(r"[\[\]{},#]|: ", value) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def example_section(name: str) -> list[str]:
    example = task_example(name)
    if example is None:
        return ["## Example", "", f"`zarrmill task {name} --set KEY=VALUE ...` (the task's module gives no "
                "`EXAMPLE`).", ""]
    params = example["params"]
    lines = ["## Example", ""]
    after = example.get("after")
    if after:
        lines += [f"Run it in the folder where the [{after}]({after}.md) example ran: it reads what that "
                  "example writes.", ""]
    if example.get("sample"):
        lines += ["Its input is a sample (once per folder; a second call refuses a folder that is not "
                  "empty):", "", "```bash", f"zarrmill sample-data {' '.join(example['sample'])}", "```", ""]
    if example.get("note"):
        lines += [example["note"], ""]
    lines += ["As a workflow file (`zarrmill run example.yaml`; `--dry-run` sizes it first):", "", "```yaml",
              example_workflow(name, params).rstrip(), "```", "", "The same from the command line:", "",
              "```bash", example_command(name, params), "```", ""]
    return lines


def _factory_default(task: Any, key: str) -> str:
    value = task.params_model.model_fields[key].get_default(call_default_factory=True)
    value = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return f"`{json.dumps(value)}`"


def _doc(text: str) -> str:
    """A docstring as Markdown: reStructuredText literals and roles (``:class:`X```) become code."""
    return re.sub(r":[a-z]+:`([^`]+)`", r"`\1`", (text or "").replace("``", "`"))


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


# -- the Python API: plain Markdown from signatures and docstrings -------------------------------------
API_PAGES = {
    "training-data": ("Python API: patch stores and compressed sets",
                      "Reading what [patch-extract](../tasks/patch-extract.md) and [compress](../tasks/compress.md) "
                      "write, in a training loop or a notebook. Everything here returns numpy arrays; torch is "
                      "not a dependency.",
                      ["zarrmill.io.training.patch_dataset:PatchDataset",
                       "zarrmill.io.training.patch_table:points_table",
                       "zarrmill.io.training.b2store:open_patches",
                       "zarrmill.io.training.b2store:PatchArray"]),
    "task-contract": ("Python API: the task contract",
                      None,  # the contract module's own docstring
                      ["zarrmill.runtime.core.contract:TaskParams",
                       "zarrmill.runtime.core.contract:PlanContext",
                       "zarrmill.runtime.core.contract:Task"]),
}
API_SPECIAL = {"__getitem__": "obj[{args}]", "__len__": "len(obj)"}  # shown as they are called


def api_pages() -> dict[str, str]:
    return {f"{API_DIR}/{name}.md": api_page(*spec) for name, spec in API_PAGES.items()}


def api_page(title: str, intro: str | None, objects: list[str]) -> str:
    if intro is None:
        intro = _doc(inspect.getdoc(importlib.import_module(objects[0].split(":")[0])) or "")
    lines = [GENERATED, f"# {title}", "", intro, ""]
    for path in objects:
        lines += api_entry(path)
    return "\n".join(lines)


def api_entry(path: str) -> list[str]:
    """One class or function: its import, signature, docstring; a class's fields and public members."""
    module_name, _, name = path.partition(":")
    obj = getattr(importlib.import_module(module_name), name)
    is_model = hasattr(obj, "model_fields")
    shown = name if is_model else f"{name}{_signature(obj)}"
    lines = [f"## {name}", "", "```python", f"from {module_name} import {name}", shown, "```", "",
             _doc(inspect.getdoc(obj) or ""), ""]
    if not inspect.isclass(obj):
        return lines
    if dataclasses.is_dataclass(obj):
        lines += ["| field | type | default |", "| --- | --- | --- |"]
        for f in dataclasses.fields(obj):
            default = ("" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                       else f"`{f.default!r}`" if f.default is not dataclasses.MISSING else "(made per instance)")
            lines.append(f"| `{f.name}` | `{_cell(_annotation(f.type))}` | {default} |")
        lines.append("")
    if is_model:
        class_vars = sorted(getattr(obj, "__class_vars__", ()))
        if class_vars:
            lines += ["Class attributes a subclass may set:", "", "| attribute | default |", "| --- | --- |"]
            lines += [f"| `{v}` | `{_cell(repr(getattr(obj, v)))}` |" for v in class_vars]
            lines.append("")
    for member_name, member in vars(obj).items():
        if member_name.startswith("_") and member_name not in API_SPECIAL:
            continue
        if isinstance(member, property):
            ret = inspect.signature(member.fget).return_annotation
            kind = f" -> {_annotation(ret)}" if ret is not inspect.Signature.empty else ""
            lines += [f"### {name}.{member_name}", "", f"Property{kind}.", "", _doc(inspect.getdoc(member) or ""), ""]
        elif isinstance(member, (classmethod, staticmethod)) or inspect.isfunction(member):
            func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if getattr(func, "__doc__", None) is None or member_name.startswith("model_"):
                continue  # pydantic's hooks and undocumented helpers are not the API
            signature = _signature(func, drop_first=not isinstance(member, staticmethod))
            call = f"{member_name}{signature}"
            if member_name in API_SPECIAL:  # (i: int) -> T as obj[i: int] -> T
                args, _, ret = signature[1:].partition(")")
                call = API_SPECIAL[member_name].format(args=args) + ret
            heading = API_SPECIAL.get(member_name, "{name}.{member}").format(name=name, member=member_name, args="i")
            lines += [f"### {heading.replace('obj', name)}", "", "```python", call, "```", "",
                      _doc(inspect.getdoc(func) or ""), ""]
    return lines


def _signature(obj: Any, drop_first: bool = False) -> str:
    """``(a: T = default, ...) -> R`` with annotations as the source writes them."""
    sig = inspect.signature(obj)
    params = list(sig.parameters.values())[1 if drop_first else 0:]
    words = []
    for p in params:
        word = ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
        if p.annotation is not p.empty:
            word += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            word += f" = {p.default!r}"
        words.append(word)
    ret = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"({', '.join(words)}){ret}"


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
