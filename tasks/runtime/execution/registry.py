"""Find tasks through the ``zarrmill.tasks`` entry-point group, so a lab's own package can add
tasks without touching this repository. The built-in ones are also listed here so a source tree
that was not pip-installed still works."""
from __future__ import annotations

import importlib
import re
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import ConfigError, did_you_mean

if TYPE_CHECKING:  # the contract imports pydantic: `zarrmill tasks` lists tasks without it
    from ..core.contract import Task

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
    """The first sentence of a task module's docstring, whole (it may wrap over several lines of
    the source), as one line of plain text; read from the source without importing the module (a
    task imports zarr, numpy and its codecs at import time: a second for the whole list)."""
    import importlib.util

    module = task_modules()[name].split(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return first_sentence(get_task(name).doc)
    return first_sentence(module_docstring(Path(spec.origin)))


def module_docstring(source: Path) -> str:
    """The docstring of a module's source, read up to its first statement (parsing the whole module
    cost ``zarrmill tasks`` a fifth of its time where no bytecode is cached)."""
    import ast
    import inspect
    import tokenize

    skip = {tokenize.ENCODING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE}
    with tokenize.open(source) as f:
        strings = []
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type in skip and not strings:
                continue
            if tok.type != tokenize.STRING:
                break
            strings.append(tok.string)
    if not strings or any(s.lstrip("rRuU")[:1] not in "'\"" for s in strings):  # an f-string or bytes is no docstring
        return ""
    return inspect.cleandoc(ast.literal_eval(" ".join(strings)))


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line, ``literals`` as plain text."""
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    paragraph = re.sub(r"``([^`]+)``", r"\1", paragraph)
    for end in re.finditer(r"[.!?](?=\s+[A-Z(])", paragraph):
        if not re.search(r"(\be\.g|\bi\.e|\betc|\bvs|\bcf|\bapprox|\b[A-Za-z])\.$", paragraph[:end.end()]):
            return paragraph[:end.end()]
    return paragraph


@lru_cache(maxsize=None)
def get_task(name: str) -> Task:
    modules = task_modules()
    if name not in modules:
        hint = did_you_mean(name, modules)
        raise ConfigError(f"unknown task {name!r}; {hint + ' ' if hint else ''}known tasks: {', '.join(modules)}")
    from ..core.contract import Task

    module = importlib.import_module(modules[name].split(":")[0])
    return Task.from_module(name, module)
