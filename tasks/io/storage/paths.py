"""Paths zarrmill builds and deletes: containment (every name or metadata path joined through
:func:`inside` stays inside its root), the folders never deleted (/, the current folder, home),
and the bookkeeping beside a store (``.<name>.zarrmill``), the only files deleted without an
output guard's ownership check."""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from . import guard_fs

from .ozx_path import is_virtual
from ...errors import InputError, UnsafeOutputError

MARKER_SUFFIX = ".zarrmill"  # a store's bookkeeping: <parent>/.<store name>.zarrmill/
OWNER_FILE = "owner.json"
CREATED_LOG = "created.log"
LOCK_FILES = ("lock", "lock.takeover")  # the run lock lives beside the owner marker
# inside a store while its first step runs: the id of its owner marker (ownership.py)
CLAIM_FILE = ".zarrmill-claim"
# the claim on its way in (disk_backend.replace writes a temp file, then renames it): a kill in
# between leaves it in the store, with the id of the marker beside it (ownership.py)
CLAIM_PARTIAL = re.compile(r"\.zarrmill-claim\.[0-9a-f]{32}\.partial\Z")
# files that mark a folder as zarrmill's own bookkeeping: a run folder, a scheduled run's state folder
BOOKKEEPING_MARKERS = (".zarrmill-run", ".zarrmill-state")


def bookkeeping_dir(root: str | os.PathLike[str]) -> Path:
    """The folder beside ``root`` where zarrmill keeps the owner marker, created.log, locks and the
    ledger of that store: ``<parent>/.<name>.zarrmill`` (the store's real location, links resolved)."""
    base = real(root)
    return base.parent / f".{base.name}{MARKER_SUFFIX}"


def checked_key(key: str) -> str:
    """A relative, '/'-separated bookkeeping key that cannot leave its folder."""
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeOutputError(f"{key}: a bookkeeping key must stay inside its folder")
    return key


def is_bookkeeping_name(name: str) -> bool:
    """A folder name zarrmill uses for a store's bookkeeping (fingerprints and sizes skip them)."""
    return name.startswith(".") and name.endswith(MARKER_SUFFIX) and len(name) > len(MARKER_SUFFIX) + 1


def real(path: str | os.PathLike[str]) -> Path:
    """Absolute path with every existing symlink resolved; refuses symlink loops."""
    path = Path(os.path.abspath(path))
    probe = path
    while True:  # the longest existing prefix must resolve: a loop makes stat fail with ELOOP
        try:
            os.stat(probe)
            break
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UnsafeOutputError(f"{path}: the path runs through a symlink loop; fix or remove the link") from err
            if probe.parent == probe:
                break
            probe = probe.parent
    return Path(os.path.realpath(path))


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def inside(root: str | os.PathLike[str], *parts: str, what: str = "path", resolve: bool = True) -> Path:
    """``root/parts...``, refused unless it stays inside ``root``: by name always, and once
    symlinks are resolved where ``resolve`` (paths to write; reading may follow a link out).
    ``what`` names where the parts came from (a metadata field, a name) for the message."""
    for part in parts:
        if not isinstance(part, str) or part == "" and len(parts) > 1 or "\x00" in part:
            raise InputError(f"{root}: {what} {part!r} is not a valid relative path")
        if os.path.isabs(part) or ".." in Path(part).parts:
            raise InputError(f"{root}: {what} {part!r} leaves its store ('..' or an absolute path); "
                             "paths in metadata must stay inside the store")
    if is_virtual(root):  # a remote store or an archive: names are all there is
        joined = root
        for part in parts:
            for piece in str(part).split("/"):
                if piece not in ("", "."):
                    joined = joined / piece
        return joined
    joined = Path(os.path.abspath(os.path.join(root, *parts)))
    if not resolve:
        return joined
    base = real(root)
    if not is_within(real(joined), base):
        raise InputError(f"{root}: {what} {'/'.join(parts)!r} resolves outside the store "
                         f"(through a symlink to {real(joined)}); zarrmill never writes outside its output")
    return joined


def forbidden_roots() -> list[Path]:
    out = [Path("/"), real(Path.cwd())]
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if home and home != "~":
        out.append(real(home))
    return out


def never_delete(path: Path) -> None:
    """Second line of defence, independent of ownership: nothing that is or contains /, the
    current folder or the home folder is ever deleted or emptied."""
    target = real(path)
    for bad in forbidden_roots():
        if is_within(bad, target):
            raise UnsafeOutputError(f"{path}: refusing to delete or empty it: it is or contains {bad}")


def remove_empty_folder(path: str | os.PathLike[str], quiet: bool = True) -> bool:
    """Delete a folder only if it is empty (``rmdir``: anything put in it, by anyone, stops it),
    and never /, the current folder, home or a folder holding them. True when it is gone."""
    never_delete(Path(path))
    return guard_fs.remove_empty(path, quiet=quiet)


def remove_bookkeeping(path: str | os.PathLike[str]) -> None:
    """Delete one of zarrmill's own bookkeeping files or folders: ledger records and locks inside a
    store's bookkeeping folder, locks in a scheduled run's state folder, a run folder. Refused for
    anything else, and for /, the current folder and home. The folder that makes it bookkeeping is
    judged as it is acted on (a real folder of the running user's, never a link), and the path is
    reached below it without following links."""
    path = Path(os.path.abspath(path))
    never_delete(path)
    base = _bookkeeping_base(path)
    if base is None:
        raise UnsafeOutputError(f"{path}: not in a folder zarrmill keeps for itself; it is never deleted")
    if not guard_fs.check_own_folder(base, "bookkeeping", marked=is_bookkeeping_name(base.name)):
        return
    guard_fs.remove(base.parent if base == path else base, path, tree=True, links=False)


def _bookkeeping_base(path: Path) -> Path | None:
    """The store bookkeeping folder holding ``path``, else the nearest of ``path`` and two folders
    above it that carries a run or state marker (a regular file, not a link)."""
    for folder in path.parents:
        if is_bookkeeping_name(folder.name):
            return folder
    for folder in (path, path.parent, path.parent.parent):
        for marker in BOOKKEEPING_MARKERS:
            try:
                if stat.S_ISREG(os.lstat(folder / marker).st_mode):
                    return folder
            except OSError:
                continue
    return None
