"""What a kind of storage declares, once, in its own module (kinds/<name>.py): the URL schemes it
serves, what it offers (``Traits``), whether zarrmill writes there, the rules a URL of it must
follow, how zarr opens a node of it, and, where zarrmill writes, the classes that guard a store there
(a ``Place``) and keep its bookkeeping (a ``Backend``). Code elsewhere asks ``kinds.kind_of`` for these;
a kind that keeps its data on this machine (``Traits.local``) also says where (``local_path``), so
the output guard compares it with the output as a path."""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from zarr.storage import StorePath

SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


def is_upath(obj: object) -> bool:
    """A ``upath.UPath`` (told by its class, without touching ``.fs``, which makes a client)."""
    return type(obj).__module__.startswith("upath")


def scheme_of(text: str | os.PathLike[str]) -> str | None:
    """The URL scheme of ``text`` ('s3', 'https', ...), or None for a local path."""
    if isinstance(text, Path):
        return None
    if is_upath(text):
        return str(text.protocol) or None
    match = SCHEME.match(str(text))
    return match["scheme"].lower() if match else None


@dataclass(frozen=True)
class Traits:
    """What a kind of storage offers: callers outside io/storage ask for what they need (a local
    path to memory-map, how often to record) and never where the data is."""

    local: bool  # a file system of this machine: memory maps, folder walks, appends, renames
    whole_writes: bool  # every write lands whole or not at all (a PUT): no temp file is ever left
    writes_are_requests: bool  # each write is a round trip to a server: small records are batched more
    server_may_be_gone: bool  # cleaning up after a failure may fail too; the next run finishes it
    lists: bool = True  # a folder or prefix can be listed (a web server answers only for names it is asked)


DISK = Traits(local=True, whole_writes=False, writes_are_requests=False, server_may_be_gone=False)
SERVER = Traits(local=False, whole_writes=True, writes_are_requests=True, server_may_be_gone=True)


class StorageKind:
    """One kind of storage. A subclass sets the class attributes and overrides what its URLs need."""

    name: ClassVar[str]  # for messages and the registry
    schemes: ClassVar[tuple[str, ...]]  # the URL schemes it serves; () for local paths
    traits: ClassVar[Traits]
    rank: ClassVar[int] = 50  # order in messages (a scheme belongs to one kind only: registering two is refused)
    shown: ClassVar[str] = ""  # how the help names its URLs ("s3://bucket/prefix")
    hint: ClassVar[str] = ""  # a sentence for a user whose scheme zarrmill does not serve
    # where zarrmill writes: "module:name" of the Place, the Backend and the bookkeeping function,
    # relative to io/storage with the leading dot (".place_disk:DiskPlace"), all three or none
    # (imported when first used: no import of a kind goes up to them)
    place: ClassVar[str] = ""
    backend: ClassVar[str] = ""
    bookkeeping: ClassVar[str] = ""

    @property
    def writable(self) -> bool:
        return bool(self.place)

    def local_path(self, text: str) -> Path | None:
        """The file or folder of this machine that ``text`` names, for a kind whose data is local."""
        return None

    def check(self, text: str, write: bool, what: str) -> None:
        """One line for a URL of this kind that zarrmill cannot serve; nothing when it can."""

    def zarr_path(self, scheme: str | None, rest: str) -> str | StorePath:
        """The node ``scheme://rest`` as zarr-python opens it."""
        raise NotImplementedError(f"{self.name}: zarr opens its nodes by path")

    def reset(self) -> None:
        """Forget the clients made in this process (the environment they were made from changed)."""

    def load(self, which: str) -> object:
        """The class or function named by ``place``, ``backend`` or ``bookkeeping`` (a kind zarrmill
        only reads has none: places.py refuses it before asking)."""
        module, _, name = getattr(self, which).partition(":")
        return getattr(importlib.import_module(module, package=__package__.rsplit(".", 1)[0]), name)

    def problems(self) -> list[str]:
        """What is wrong with this declaration (checked when the kinds are registered)."""
        out = []
        declared = [bool(getattr(self, w)) for w in ("place", "backend", "bookkeeping")]
        if any(declared) and not all(declared):
            out.append("declares some of place, backend and bookkeeping: a kind zarrmill writes needs all three")
        if self.schemes and self.traits.local and type(self).local_path is StorageKind.local_path:
            out.append("keeps its data on this machine (traits.local) but has no local_path: the output guard "
                       "could not compare it with an output")
        return out
