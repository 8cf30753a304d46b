"""Find tasks through the ``zarrmill.tasks`` entry-point group, so a lab's own package can add
tasks without touching this repository. The built-in ones are also listed here so a source tree
that was not pip-installed still works."""
from __future__ import annotations

import importlib
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path

from ..errors import ConfigError
from .contract import Task

ENTRY_POINT_GROUP = "zarrmill.tasks"
BUILTIN = {
    "cluster-check": "zarrmill.cluster_check",
    "compress": "zarrmill.compress",
    "generate": "zarrmill.generate",
    "generate-plate": "zarrmill.generate_plate",
    "ingest": "zarrmill.ingest",
    "patch-extract": "zarrmill.patches",
    "pyramid": "zarrmill.pyramid",
    "rechunk": "zarrmill.rechunk",
    "reshard": "zarrmill.reshard",
    "tune": "zarrmill.tune",
}


@lru_cache(maxsize=1)
def task_modules() -> dict[str, str]:
    """name -> module path: the built-in tasks plus other packages' entry points, which may add
    tasks but never replace a built-in one."""
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN and ep.value.split(":")[0] != BUILTIN[ep.name]:
            package = ep.dist.name if ep.dist is not None else ep.value.split(".")[0]
            raise ConfigError(f"the installed package {package!r} registers a task named {ep.name!r} "
                              f"({ep.value}), which would replace zarrmill's built-in task; give it "
                              "another name or uninstall that package")
        found[ep.name] = ep.value
    return dict(sorted(found.items()))


def task_names() -> list[str]:
    return list(task_modules())


def task_summary(name: str) -> str:
    """The first line of a task module's docstring, read from its source without importing it
    (a task imports zarr, numpy and its codecs at import time: a second for the whole list)."""
    import ast
    import importlib.util

    module = task_modules()[name].split(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return get_task(name).summary
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


@lru_cache(maxsize=None)
def get_task(name: str) -> Task:
    modules = task_modules()
    if name not in modules:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(modules)}")
    module = importlib.import_module(modules[name].split(":")[0])
    return Task.from_module(name, module)
