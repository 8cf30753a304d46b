"""Load YAML while remembering where every value came from, so each error names file:line:column."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

Loc = tuple[Any, ...]


@dataclass
class Located:
    """A parsed document plus the source position of every mapping key / sequence item."""

    data: Any
    source: str
    positions: dict[Loc, tuple[int, int]]

    def where(self, loc: Loc) -> str:
        """``file:line:col`` of the deepest known prefix of ``loc``."""
        for n in range(len(loc), -1, -1):
            pos = self.positions.get(tuple(loc[:n]))
            if pos is not None:
                return f"{self.source}:{pos[0]}:{pos[1]}"
        return self.source


def load_located(path: Path) -> Located:
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read workflow file: {err.strerror}") from err
    return loads_located(text, str(path))


def loads_located(text: str, source: str) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        pos = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError(f"{pos}: YAML syntax error: {err.problem or err.context}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: YAML syntax error: {err}") from err
    positions: dict[Loc, tuple[int, int]] = {}
    if node is not None:
        _walk(node, (), positions)
    return Located(data if data is not None else {}, source, positions)


def _walk(node: yaml.Node, loc: Loc, out: dict[Loc, tuple[int, int]]) -> None:
    out.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            child = loc + (key,)
            out[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, loc + (i,), out)
