"""The groups and arrays of an output that a plan declares as it goes, created in one pass once
the plan is whole: valid, and within the workers' budget (runtime/execution/step_run.py). A plan
that fails before then has created no node, and the order of the list is the order of creation
(a group before what it holds), so the output guard records each node as it did before.

Plans that write into a node while planning (compress's summary, patches' table) create that node
at once with ``ensure_group``/``ensure_array`` instead."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .arrays import ArraySpec, WriteContext, check_array_name, ensure_array, ensure_group
from .location import Where


@dataclass(frozen=True)
class GroupNode:
    path: Where
    zarr_format: int


@dataclass(frozen=True)
class ArrayNode:
    """The array ``name`` under the group ``root`` ("" for ``root`` itself)."""

    root: Where
    name: str
    spec: ArraySpec

    def __post_init__(self) -> None:  # a name from metadata is judged where it is built
        check_array_name(self.root, self.name)


Node = GroupNode | ArrayNode


def create_nodes(nodes: Iterable[Node], ctx: WriteContext) -> None:
    """Each node, in order, through the output guard (kept as made on a resume)."""
    for node in nodes:
        if isinstance(node, GroupNode):
            ensure_group(node.path, node.zarr_format, ctx)
        else:
            ensure_array(node.root, node.name, node.spec, ctx)
