"""Carry an image's ``tables/`` and ``labels/`` (ROI and feature tables, label images) into a
copy of the image, as Fractal and ngio users expect after a rechunk. Same zarr format: the files
are copied as they are (exact bytes; links inside the input are skipped, never followed or
recreated). Another zarr format: every group and array is rewritten through zarr's API, block by
block of the source chunks, so memory stays at one chunk."""
from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import zarr

from ...errors import UnsafeOutputError
from .guard import OutputGuard
from .handles import writable_url
from .location import is_remote, zarr_url

CARRIED = ("tables", "labels")


def carry_subtrees(src_image: Path, dst_image: Path, dst_zarr_format: int, guard: OutputGuard) -> list[str]:
    """Copies each of ``tables``/``labels`` that ``src_image`` has; returns their names. An earlier
    copy is removed through the output guard first (only if zarrmill made it), so a subtree the
    source no longer has never lingers; the new one is recorded with the guard before it is made."""
    carried = []
    for name in CARRIED:
        src, dst = src_image / name, dst_image / name
        remote = is_remote(src) or is_remote(dst)
        if not src.is_dir() or (not is_remote(src) and src.is_symlink()):
            continue
        if (dst.exists() if is_remote(dst) else os.path.lexists(dst)):
            guard.remove(dst, " by the copy of the input's " + name)
        guard.will_create(dst)
        if _zarr_format(src) == dst_zarr_format and remote:
            _copy_objects(src, dst, guard)
        elif _zarr_format(src) == dst_zarr_format:
            shutil.copytree(src, dst, ignore=_links)
        else:
            _convert(zarr.open_group(zarr_url(src), mode="r"), zarr.open_group(writable_url(dst_image), mode="a"), name)
        carried.append(name)
    return carried


def _copy_objects(src, dst, guard: OutputGuard) -> None:
    """Every file or object under ``src`` to the same place under ``dst``, bytes as they are (in or
    out of a bucket: one read and one write each). Each target passes the guard's stays-inside
    check: an object key may hold '..' or '//', which must never lead out of the output."""
    base = str(src).rstrip("/")
    for path in sorted(_files_under(src)):
        rel = str(path)[len(base):].lstrip("/")
        if any(part in ("", ".", "..") for part in rel.split("/")):
            raise UnsafeOutputError(f"{path}: the object key has an empty, '.' or '..' part; copied to "
                                    f"{dst} it would not stay where its name says: rename it in the source")
        target = guard.contain(str(dst).rstrip("/") + "/" + rel, what=f"the copy of {path}")
        data = path.read_bytes()
        if is_remote(target):
            target.write_bytes(data)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def _files_under(root):
    for entry in root.iterdir():
        if not is_remote(entry) and entry.is_symlink():
            continue  # as copytree with _links: never followed
        if entry.is_dir():
            yield from _files_under(entry)
        elif entry.is_file():
            yield entry


def _links(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if os.path.islink(os.path.join(folder, n))}


def _zarr_format(path: Path) -> int:
    return 3 if (path / "zarr.json").exists() else 2


def _convert(src: zarr.Group, parent: zarr.Group, name: str) -> None:
    group = parent.require_group(name)
    group.attrs.update(dict(src.attrs))
    for child_name, child in src.members():
        if isinstance(child, zarr.Group):
            _convert(child, group, child_name)
            continue
        dst = group.create_array(child_name, shape=child.shape, dtype=child.dtype, chunks=child.chunks,
                                 fill_value=child.fill_value)
        dst.attrs.update(dict(child.attrs))
        steps = [range(0, n, c) for n, c in zip(child.shape, child.chunks)]
        for start in itertools.product(*steps):
            block = tuple(slice(a, min(a + c, n)) for a, c, n in zip(start, child.chunks, child.shape))
            dst[block] = child[block]
