"""Load YAML while remembering where every value came from, so each error names file:line:column."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigError

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


MAX_NODES = 100_000  # a workflow is a few hundred nodes; aliases must not expand past this


def load_located(path: Path, what: str = "workflow file") -> Located:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read workflow file: {err.strerror}") from err
    if b"\x00" in raw:
        raise ConfigError(f"{path}: a binary file, not a YAML text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r}); "
                          "save the file as UTF-8") from None
    return loads_located(text, str(path), what)


def loads_located(text: str, source: str, what: str = "workflow file") -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _check_size(node, source)  # before construction: an alias bomb never expands
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        pos = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError(f"{pos}: YAML syntax error: {err.problem or err.context}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: YAML syntax error: {err}") from err
    if data is None:  # nothing but blank lines or comments
        hint = "give it a name and steps (workflows/demo.yaml is an example)" if what == "workflow file" \
            else "give the parameters as name: value lines"
        raise ConfigError(f"{source}:1:1: the {what} is empty; {hint}")
    positions: dict[Loc, tuple[int, int]] = {}
    if node is not None:
        _walk(node, (), positions, source)
    return Located(data, source, positions)


def _check_size(root: yaml.Node, source: str) -> None:
    """Nodes the document expands to (aliases counted each time they are used), bounded; a
    recursive alias is refused."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:
            raise ConfigError(f"{source}:{node.start_mark.line + 1}: a YAML alias refers to itself")
        active.add(id(node))
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise ConfigError(f"{source}: YAML aliases expand to more than {MAX_NODES} values "
                                  "(an alias bomb?); write the values out")
        active.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root)


def _walk(node: yaml.Node, loc: Loc, out: dict[Loc, tuple[int, int]], source: str) -> None:
    out.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and key_node.value in seen:
                raise ConfigError(f"{source}:{line}: key {key_node.value!r} appears twice "
                                  f"(lines {seen[key_node.value]} and {line}); keep one")
            seen.setdefault(key_node.value, line)
        for key_node, value_node in node.value:
            key = key_node.value
            child = loc + (key,)
            out[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, child, out, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, loc + (i,), out, source)
