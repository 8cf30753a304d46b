"""Kinds of storage, one module each: a module here that sets ``KIND`` (a ``base.StorageKind``) is
registered, and the rest of zarrmill (URL checks, opening a node, the output guard's place, the
bookkeeping backend, what a kind offers) reads the kinds through ``kind_of`` only. Adding a kind is
adding its module."""
from __future__ import annotations

import importlib
import os
import pkgutil

from ....errors import ConfigError
from .base import StorageKind, scheme_of


def _registered() -> list[StorageKind]:
    found = []
    for module in pkgutil.iter_modules(__path__):
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(declared, StorageKind):
            found.append(declared)
    return sorted(found, key=lambda k: (k.rank, k.name))


def by_scheme(kinds: list[StorageKind]) -> dict[str | None, StorageKind]:
    """The kind of each scheme (None: local paths). A scheme claimed twice, or a kind declared in
    part, is refused here, at import: a kind module must never take over paths another serves."""
    table: dict[str | None, StorageKind] = {}
    for kind in kinds:
        wrong = kind.problems()
        for scheme in kind.schemes or (None,):
            if scheme in table:
                wrong.append(f"claims {scheme or 'local paths'}, which {table[scheme].name} serves")
            table[scheme] = kind
        if wrong:
            raise ImportError(f"zarrmill storage kind {kind.name!r}: " + "; ".join(wrong))
    if None not in table:
        raise ImportError("zarrmill storage kinds: none serves local paths")
    return table


KINDS: list[StorageKind] = _registered()
_BY_SCHEME = by_scheme(KINDS)


def kind_of(where: str | os.PathLike[str], what: str = "path") -> StorageKind:
    """The kind that serves ``where``: the local one for a path, else the one of its URL scheme;
    one line naming what zarrmill serves for any other scheme."""
    scheme = scheme_of(where)
    if scheme not in _BY_SCHEME:
        raise ConfigError(f"{where}: {what} uses {scheme}://, which zarrmill does not serve; {offer()}")
    return _BY_SCHEME[scheme]


def writable_kind(root: str | os.PathLike[str]) -> StorageKind:
    """The kind of ``root``, where zarrmill is to write or keep records: one line for a kind it only
    reads."""
    kind = kind_of(root)
    if not kind.writable:
        raise ConfigError(f"{root}: zarrmill only reads a {kind.name}; write to {write_to()}")
    return kind


def write_to() -> str:
    """Where zarrmill writes, for a user who named a place it only reads."""
    return " or ".join(["a local path"] + [k.shown for k in KINDS if k.schemes and k.writable])


def offer() -> str:
    """What zarrmill reads and writes, for a user whose URL it does not serve."""
    writes = [k.shown for k in KINDS if k.schemes and k.writable]
    reads = [k.shown for k in KINDS if k.schemes and not k.writable]
    text = "it reads and writes local paths" + "".join(f" and {w}" for w in writes)
    text += f", and reads {' and '.join(reads)}" if reads else ""
    hints = " ".join(k.hint for k in KINDS if k.hint)
    return f"{text} ({hints})" if hints else text
