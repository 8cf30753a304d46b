"""One look at an input folder for every plate reader's detector: the names of its files and
folders down to ``DEPTH`` levels (instruments nest their marker files: MetaXpress writes
``<plate>/<date>/<id>/...``, CV8000 exports put the measurement a level or two down), read once,
nothing opened. Detectors match their own marker files against it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DEPTH = 3  # marker files up to three levels below the folder the user names
MAX_ENTRIES = 200_000  # a folder of a million plane files is still scanned in bounded time


@dataclass(frozen=True)
class FolderScan:
    root: Path
    files: tuple[PurePosixPath, ...]  # relative to root, at most DEPTH levels down
    dirs: tuple[PurePosixPath, ...]

    def named(self, predicate) -> list[PurePosixPath]:
        return [f for f in self.files if predicate(f.name)]

    def dir_named(self, predicate) -> list[PurePosixPath]:
        return [d for d in self.dirs if predicate(d.name)]


def scan(root: Path, depth: int = DEPTH) -> FolderScan:
    files: list[PurePosixPath] = []
    dirs: list[PurePosixPath] = []
    level = [PurePosixPath()]
    for _ in range(depth + 1):
        below = []
        for rel in level:
            try:
                entries = sorted(os.scandir(Path(root) / rel), key=lambda e: e.name)
            except OSError:
                continue  # unreadable sub-folder: the reader that needs it says so
            for entry in entries:
                if len(files) + len(dirs) >= MAX_ENTRIES:
                    break
                path = rel / entry.name
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(path)
                    below.append(path)
                elif entry.is_file():
                    files.append(path)
        level = below
    return FolderScan(Path(root), tuple(files), tuple(dirs))
