"""A location inside a zipped OME-Zarr (``plate.ozx/B/03/0``): read only, with the face of a
``pathlib.Path`` that tasks use (``/``, ``name``, ``parent``, ``exists``, ``is_dir``, ``iterdir``,
``read_bytes``), so a task reads an ``.ozx`` input as it reads a folder. Its text is the file's
path followed by the entry's, which :func:`split_ozx` takes apart again (units carry paths as
text to their workers). zarr-python opens its arrays through its own ``ZipStore``
(location.zarr_url). One ``ZipFile`` per archive and process: its central directory is read once."""
from __future__ import annotations

import os
import threading
import zipfile
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Iterator

SUFFIX = ".ozx"
BUILD = "build.zarr"  # the store a step writes before it is packed: <parent>/.<name>.ozx.zarrmill/build.zarr


def is_archive_build(path: str | os.PathLike[str]) -> bool:
    """``path`` is the store a step builds to pack into an ``.ozx`` (tasks then shard for few entries)."""
    if isinstance(path, OzxPath) or type(path).__module__.startswith("upath") or "://" in str(path):
        return False  # a bucket or an archive is never a build store
    path = Path(str(path))
    return path.name == BUILD and path.parent.name.lower().endswith(f"{SUFFIX}.zarrmill")


def split_ozx(text: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """(archive file, entry path inside it) for a local path that runs through an existing
    ``.ozx`` file; None for anything else."""
    text = os.fspath(text) if not isinstance(text, str) else text
    parts = Path(text).parts
    for i, part in enumerate(parts):
        if part.lower().endswith(SUFFIX):
            archive = Path(*parts[:i + 1])
            if archive.is_file():
                return archive, "/".join(parts[i + 1:])
            return None
    return None


def is_virtual(obj: object) -> bool:
    """A location that is not a local file system path: a ``upath.UPath`` (a bucket, a web server)
    or a place inside an ``.ozx`` archive. Read (and, for a bucket, written) through its methods,
    never through ``open`` or ``os``."""
    return isinstance(obj, OzxPath) or type(obj).__module__.startswith("upath")


class _Index:
    """The names of one archive: files and the folders they imply."""

    def __init__(self, archive: Path):
        try:
            self.zip = zipfile.ZipFile(archive)
        except zipfile.BadZipFile as err:
            from ...errors import InputError

            raise InputError(f"{archive}: not a zip archive ({err}); an .ozx is a zipped OME-Zarr: check the "
                             "file (a copy cut short?) or give the folder store") from None
        self.lock = threading.Lock()
        self.files = {i.filename: i for i in self.zip.infolist() if not i.filename.endswith("/")}
        self.children: dict[str, set[str]] = {}
        for name in self.files:
            parts = name.split("/")
            for k in range(len(parts)):
                self.children.setdefault("/".join(parts[:k]), set()).add(parts[k])

    def read(self, name: str) -> bytes:
        with self.lock:  # one file handle: reads one at a time
            return self.zip.read(self.files[name])


@lru_cache(maxsize=64)
def _index(archive: str, mtime_ns: int, size: int) -> _Index:
    return _Index(Path(archive))


def index_of(archive: Path) -> _Index:
    st = archive.stat()
    return _index(str(archive), st.st_mtime_ns, st.st_size)  # a rewritten archive is read again


class OzxPath:
    """``inner`` (posix, '' for the root) inside ``archive``."""

    def __init__(self, archive: Path, inner: str = ""):
        self.archive = Path(os.path.abspath(archive))
        self.inner = str(PurePosixPath(inner)) if inner not in ("", ".") else ""

    def __str__(self) -> str:
        return str(self.archive / self.inner) if self.inner else str(self.archive)

    def __fspath__(self) -> str:  # the path as text: file system calls on it find nothing, never other data
        return str(self)

    def __repr__(self) -> str:
        return f"OzxPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OzxPath) and (self.archive, self.inner) == (other.archive, other.inner)

    def __lt__(self, other: "OzxPath") -> bool:
        return (str(self.archive), self.inner) < (str(other.archive), other.inner)

    def __hash__(self) -> int:
        return hash((self.archive, self.inner))

    def __truediv__(self, name: str | os.PathLike[str]) -> "OzxPath":
        rel = str(name).strip("/")
        return OzxPath(self.archive, f"{self.inner}/{rel}" if self.inner else rel)

    @property
    def name(self) -> str:
        return self.inner.rsplit("/", 1)[-1] if self.inner else self.archive.name

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    @property
    def parent(self) -> "OzxPath | Path":
        if not self.inner:
            return self.archive.parent
        return OzxPath(self.archive, self.inner.rpartition("/")[0])

    def resolve(self) -> "OzxPath":
        return OzxPath(self.archive.resolve(), self.inner)

    def absolute(self) -> "OzxPath":
        return self

    def is_file(self) -> bool:
        return self.inner in index_of(self.archive).files

    def is_dir(self) -> bool:
        return self.inner in index_of(self.archive).children and not self.is_file()

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def iterdir(self) -> Iterator["OzxPath"]:
        for child in sorted(index_of(self.archive).children.get(self.inner, ())):
            yield self / child

    def read_bytes(self) -> bytes:
        index = index_of(self.archive)
        if self.inner not in index.files:
            raise FileNotFoundError(2, "no such entry in the archive", str(self))
        return index.read(self.inner)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def size(self) -> int:
        return index_of(self.archive).files[self.inner].file_size
