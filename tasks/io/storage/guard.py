"""The one output guard: what zarrmill may create, replace or delete.

Rules (README, "What zarrmill will and will not touch"):

- zarrmill deletes or replaces only what it created: a store whose ``owner.json`` it wrote when it
  created the store (everything inside is then its own), a node it recorded in ``created.log``
  before creating it inside a store it does not own (levels added to someone else's image), or an
  empty folder. ``--overwrite`` never widens this.
- That bookkeeping (owner marker, created.log, locks, the ledger) lives beside the store, in the
  hidden folder ``.<name>.zarrmill`` (:func:`bookkeeping_dir`), never inside it: a reader walking
  the store (zarr-python's ``members()``, ome-zarr-py, napari) sees only zarr nodes. The marker
  records the store folder's identity (device and inode), so a marker left behind by a deleted
  store never makes a new folder at that path zarrmill's; once a step finished, the store's own
  provenance must carry the marker's id too (a store replaced by a copy of another is refused).
- An output is refused when it is ``/``, the current folder, the home folder or an ancestor of
  either; when it equals, lies inside or contains an input; when it is a file; when it is a
  non-empty folder or store zarrmill did not create; when its path runs through a symlink loop.
- Every path built from names or metadata is joined through :func:`inside`, which resolves it and
  refuses anything that leaves its root (``..``, absolute parts, symlinks pointing out).
- What a failed plan created is removed again (:meth:`OutputGuard.rollback`), so the file system is
  as it was before the run.

Reading through symlinks is fine (an input may be a link into an archive); writing never leaves
the output.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Iterable

from ...errors import InputError, InputNotFoundError, OutputExistsError, UnsafeOutputError

MARKER_SUFFIX = ".zarrmill"  # a store's bookkeeping: <parent>/.<store name>.zarrmill/
OWNER_FILE = "owner.json"
CREATED_LOG = "created.log"
LOCK_FILES = ("lock", "lock.takeover")  # the run lock lives beside the owner marker
# files that mark a folder as zarrmill's own bookkeeping: a run folder, a scheduled run's state folder
BOOKKEEPING_MARKERS = (".zarrmill-run", ".zarrmill-state")


def bookkeeping_dir(root: str | os.PathLike[str]) -> Path:
    """The folder beside ``root`` where zarrmill keeps the owner marker, created.log, locks and the
    ledger of that store: ``<parent>/.<name>.zarrmill`` (the store's real location, links resolved)."""
    base = real(root)
    return base.parent / f".{base.name}{MARKER_SUFFIX}"


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
    if type(root).__module__.startswith("upath"):  # a remote store: names are all there is
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


def _forbidden_roots() -> list[Path]:
    out = [Path("/"), real(Path.cwd())]
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if home and home != "~":
        out.append(real(home))
    return out


def _never_delete(path: Path) -> None:
    """Second line of defence, independent of ownership: nothing that is or contains /, the
    current folder or the home folder is ever deleted or emptied."""
    target = real(path)
    for bad in _forbidden_roots():
        if is_within(bad, target):
            raise UnsafeOutputError(f"{path}: refusing to delete or empty it: it is or contains {bad}")


def remove_bookkeeping(path: str | os.PathLike[str]) -> None:
    """Delete one of zarrmill's own bookkeeping files or folders: ledger records and locks inside a
    store's bookkeeping folder, locks in a scheduled run's state folder, a run folder. Refused for
    anything else, and for /, the current folder and home."""
    path = Path(os.path.abspath(path))
    _never_delete(path)
    if not _is_bookkeeping(path):
        raise UnsafeOutputError(f"{path}: not in a folder zarrmill keeps for itself; it is never deleted")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _is_bookkeeping(path: Path) -> bool:
    """Inside a store's bookkeeping folder, or in (or two levels below) a folder carrying a marker."""
    if any(is_bookkeeping_name(p.name) for p in path.parents):
        return True
    return any((folder / marker).is_file() for folder in (path, path.parent, path.parent.parent)
               for marker in BOOKKEEPING_MARKERS)


def _listing(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


class OutputGuard:
    """Checks and claims one output root for one step; every delete under it goes through here.

    ``in_place``: the step adds to one of its inputs (pyramid levels, a well image): the root must
    exist, and only what this guard's ``created.log`` (or the owner marker) covers may be replaced."""

    def __init__(self, root: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (),
                 in_place: bool = False):
        self.root = Path(os.path.abspath(root))
        # inputs in a bucket cannot overlap a local output
        self.inputs = [Path(os.path.abspath(p)) for p in inputs if "://" not in str(p)]
        self.in_place = in_place
        self._made: list[Path] = []     # created by this run, newest last (rollback order)
        self._created_log: set[str] | None = None

    # -- checks (read only) --------------------------------------------------------------------
    def check(self) -> None:
        """Everything that makes this root unsafe to write, before anything is written."""
        root = real(self.root)
        for bad in _forbidden_roots():
            if is_within(bad, root):
                raise UnsafeOutputError(
                    f"{self.root}: refusing to write here: it is {'/' if bad == Path('/') else 'or contains ' + str(bad)} "
                    "(the current folder, home or /); give the output its own new folder, e.g. ./out.zarr")
        if self.in_place and not root.is_dir():
            raise InputNotFoundError(f"{self.root}: does not exist (or is not a folder); this step adds to an existing store")
        if root.exists() and not root.is_dir():
            raise UnsafeOutputError(f"{self.root}: exists and is a file, not a store; choose another output path")
        for inp in self.inputs:
            src = real(inp)
            if self.in_place and src == root:
                continue
            if src == root:
                raise UnsafeOutputError(f"{self.root}: the output is the input {inp}; choose a new output path")
            if is_within(root, src):
                raise UnsafeOutputError(f"{self.root}: the output lies inside the input {inp}; choose a path outside it")
            if is_within(src, root):
                raise UnsafeOutputError(f"{self.root}: the output contains the input {inp}; choose a path beside it")
        if not self.in_place and root.is_dir() and not self.owned() and self._foreign_content(root):
            raise UnsafeOutputError(
                f"{self.root}: exists, is not empty and was not created by zarrmill; zarrmill writes only "
                "into new or empty folders (or stores it created): choose a new output path")

    def _foreign_content(self, root: Path) -> bool:
        """Anything in the folder: zarrmill's bookkeeping lives beside it, never inside."""
        return bool(_listing(root))

    @property
    def bookkeeping(self) -> Path:
        return bookkeeping_dir(self.root)

    def owned(self) -> bool:
        """The marker beside the root is zarrmill's and names this very folder (device, inode);
        and once a step sealed it, the store's provenance carries the marker's id."""
        doc = self.owner()
        if doc.get("tool") != "zarrmill":
            return False
        try:
            st = os.stat(self.root)
        except FileNotFoundError:
            return False
        if doc.get("folder") != [st.st_dev, st.st_ino]:
            return False  # another folder now stands where zarrmill's store was
        return not doc.get("sealed") or provenance_owner(self.root) == doc.get("id")

    def owner(self) -> dict:
        try:
            doc = json.loads((self.bookkeeping / OWNER_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def owner_id(self) -> str | None:
        """The id provenance records, so that the store itself names its owner marker."""
        return self.owner().get("id") if self.owned() else None

    def seal(self) -> None:
        """A step finished and wrote the store's provenance (with :meth:`owner_id`): from now on the
        store must carry that id to stay zarrmill's."""
        doc = self.owner()
        if self.owned() and not doc.get("sealed") and provenance_owner(self.root) == doc.get("id"):
            from .atomic import atomic_write_json

            atomic_write_json(self.bookkeeping / OWNER_FILE, {**doc, "sealed": True})

    def _unseal(self) -> None:
        doc = self.owner()
        if doc.get("sealed"):
            from .atomic import atomic_write_json

            atomic_write_json(self.bookkeeping / OWNER_FILE, {**doc, "sealed": False})

    def has_content(self) -> bool:
        """Data in the root."""
        return bool(_listing(self.root))

    # -- claiming and creating -----------------------------------------------------------------
    def claim(self, step: str) -> None:
        """Create the root (and missing parents, remembered for rollback) and, for a new or empty
        root, write the owner marker first, before anything else is created in it."""
        self.check()
        self._mkdirs(self.root)
        marker = self.bookkeeping
        self._mkdirs(marker)  # remembered: a failed plan on someone else's store removes it again
        if not self.in_place and not self.owned():
            from .atomic import atomic_write_json

            for name in _listing(marker):  # a ledger left by a store that stood here before is not this one's
                if name != OWNER_FILE and name not in LOCK_FILES and not name.endswith(".partial"):
                    remove_bookkeeping(marker / name)
            st = os.stat(self.root)
            atomic_write_json(marker / OWNER_FILE, {
                "tool": "zarrmill", "id": uuid.uuid4().hex, "step": step, "store": str(real(self.root)),
                "folder": [st.st_dev, st.st_ino], "created": round(time.time(), 3), "host": socket.gethostname()})

    def make_dirs(self, path: Path) -> None:
        """mkdir -p, remembering what it created (for rollback)."""
        self._mkdirs(path)

    def _mkdirs(self, path: Path) -> None:
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue  # made by a concurrent run this instant: not ours to roll back
            self._made.append(d)

    @property
    def lock_path(self) -> Path:
        return self.bookkeeping / LOCK_FILES[0]

    def contain(self, path: str | os.PathLike[str], what: str = "path") -> Path:
        """``path`` (absolute, or relative to the current folder) if it lies inside the root once
        normalised and resolved; '..' out of the root or a link out of it is refused."""
        path = Path(os.path.abspath(path))
        rel = os.path.relpath(path, self.root)
        if rel == ".":
            return path
        if rel == ".." or rel.startswith(".." + os.sep):
            raise UnsafeOutputError(f"{path}: {what} lies outside the output {self.root}; names and "
                                    "metadata paths must stay inside it")
        return inside(self.root, *Path(rel).parts, what=what)

    def will_create(self, path: Path, absent: bool | None = None) -> Path:
        """Called before creating a node: checks containment and, in a store zarrmill does not own,
        records the node in ``created.log`` first (so a crash right after still leaves it ours)."""
        path = Path(os.path.abspath(path))
        if not is_within(real(path), real(self.root)):
            raise UnsafeOutputError(f"{path}: outside the output {self.root}; zarrmill never writes outside its output")
        if not path.exists():
            if not self.owned():
                self._log_created(path)
            self._made.append(path)
        return path

    def _log_created(self, path: Path) -> None:
        rel = os.path.relpath(path, self.root)
        log = self.bookkeeping / CREATED_LOG
        self._mkdirs(log.parent)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(rel + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._created().add(rel)

    def _created(self) -> set[str]:
        if self._created_log is None:
            try:
                lines = (self.bookkeeping / CREATED_LOG).read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            self._created_log = {line for line in lines if line}
        return self._created_log

    # -- replacing and deleting ----------------------------------------------------------------
    def may_replace(self, path: Path) -> bool:
        path = Path(os.path.abspath(path))
        if not is_within(real(path), real(self.root)) or path == self.root and self.in_place:
            return False
        if not path.exists() or (path.is_dir() and not _listing(path)):
            return True
        if self.owned():
            return True
        rel = Path(os.path.relpath(path, self.root))
        return any(str(p) in self._created() for p in [rel, *rel.parents] if str(p) != ".")

    def remove(self, path: Path, why: str = "") -> None:
        """Delete ``path`` (a node of the output), only if zarrmill created it."""
        path = Path(os.path.abspath(path))
        self._refuse_unless_replaceable(path, why)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)

    def _refuse_unless_replaceable(self, path: Path, why: str = "") -> None:
        _never_delete(path)
        if not self.may_replace(path):
            raise OutputExistsError(
                f"{path}: exists and was not created by zarrmill, so it is never replaced{why}; "
                "choose a new output path, or move it away yourself")

    def clear(self) -> None:
        """Empty an owned store (``--overwrite`` of the step that created it), keeping its marker."""
        _never_delete(self.root)  # even with a marker in it: a marker can be planted, / cannot move
        if not self.owned() or self.in_place:
            raise OutputExistsError(f"{self.root}: not a store zarrmill created; it is never emptied")
        for name in _listing(self.root):  # all of it may go, or nothing goes (a link planted inside)
            self._refuse_unless_replaceable(self.root / name)
        self._unseal()  # emptied, the store carries no provenance until its step finishes again
        for name in _listing(self.root):
            self.remove(self.root / name)
        for name in _listing(self.bookkeeping):
            if name != OWNER_FILE and name not in LOCK_FILES:
                remove_bookkeeping(self.bookkeeping / name)

    def commit(self) -> None:
        """The plan succeeded: what it created is kept, whatever happens later in the run."""
        self._made.clear()

    def rollback(self) -> None:
        """Remove what this run created (a failed plan): newest first, only what is still ours."""
        for path in reversed(self._made):
            _never_delete(path)  # made by this run, so never one of these; checked all the same
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except OSError:
                    pass
        self._made.clear()


PROVENANCE_FILE = "zarrmill-provenance.json"
META_DIR = "zarrmill"  # a folder output's own files (summary, provenance) when its top level must hold cases only


def provenance_side_file(root: Path) -> Path:
    """Where a folder output (not a zarr store) keeps its provenance: ``zarrmill/provenance.json``
    when the output has that folder (compress's .b2nd sets: nnU-Net reads every top-level file as a
    case), else ``zarrmill-provenance.json`` at its top."""
    from .location import as_location

    root = as_location(root)
    return root / META_DIR / "provenance.json" if (root / META_DIR).is_dir() else root / PROVENANCE_FILE


def provenance_owner(root: Path) -> str | None:
    """The owner id a store's provenance records (root attributes of a zarr store, else the side
    file zarrmill writes into a folder output), or None."""
    from .location import as_location

    for name, inner in (("zarr.json", "attributes"), (".zattrs", None), ("", "")):
        path = as_location(root) / name if name else provenance_side_file(root)
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if inner == "":
            prov = doc
        else:
            attrs = (doc.get(inner, {}) if inner else doc) if isinstance(doc, dict) else {}
            ours = attrs.get("zarrmill") if isinstance(attrs, dict) else None
            prov = ours.get("provenance", {}) if isinstance(ours, dict) else {}
        owner = prov.get("owner") if isinstance(prov, dict) else None
        if owner is not None or name != "zarr.json":
            return owner if isinstance(owner, str) else None
    return None
