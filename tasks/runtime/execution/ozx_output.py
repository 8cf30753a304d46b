"""Outputs that end in ``.ozx``: zipped OME-Zarr (RFC-9), written by any task that writes OME-Zarr.

The step runs as for a folder, into a build store beside the target, in the target's bookkeeping
folder (``.<name>.ozx.zarrmill/build.zarr``, its own ledger, lock and owner marker). Once the step
is done, the build store is packed into the zip in one sequential pass (io/storage/zip_writer.py):

- entries are stored (no zip compression: the chunks are compressed already), ZIP64, every
  ``zarr.json`` first in breadth-first order with the root's first (in the archive and in its
  central directory), then the chunk and shard files; the archive comment is RFC-9's
  ``{"ome": {"version": ...}}`` followed by a NUL;
- each chunk or shard file is deleted (through the build store's guard) as soon as its entry is
  durable in the archive (synced and journaled, in batches of up to 64 MB or 2 s), so the disk
  holds the data once plus that batch; the metadata stays until the archive is complete;
- the archive is written as ``packed.zip`` in the bookkeeping folder and renamed onto the target
  only when it is complete and synced: a killed run never leaves a file that passes for finished,
  and a rerun continues the archive where the journal says it stopped.

A target that exists is replaced only if zarrmill packed it: the archive's root ``zarr.json``
names the build store's owner marker (provenance), as a folder store does. What is left of the
build store after packing is its root ``zarr.json`` (the provenance that makes the ledger count)."""
from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

from ...errors import ConfigError, OutputLockedError, UnsafeOutputError
from ...io.storage.guard import OutputGuard, open_guard
from ...io.storage.location import on_disk
from ...io.storage.guard_fs import (check_own_folder, make_own_folder, open_own_file, open_regular, replace_file, walk,
                                   walk_regular)
from ...io.storage.paths import OWNER_FILE, bookkeeping_dir, never_delete, remove_bookkeeping, remove_empty_folder
from ...io.storage.ozx_path import BUILD, SUFFIX
from ...io.storage.zip_writer import ZipWriter
from ..core.contract import TaskParams
from ..core.locks import Locked, open_lock

PACKED, JOURNAL, DONE = "packed.zip", "packed.journal", "packed.done"
METADATA = "zarr.json"
# entries are made durable (archive synced, journal written) in batches: the disk then holds at
# most this much twice, and a sync per entry is not paid
COMMIT_BYTES, COMMIT_SECONDS = 64 << 20, 2.0


def is_ozx(path: Any) -> bool:
    return str(path).lower().rstrip("/").endswith(SUFFIX)


def ozx_target(params: TaskParams) -> Path | None:
    """The ``.ozx`` file a step writes, or None. A step that adds to its input cannot add to a zip."""
    if params.writes_in_place():
        if is_ozx(params.ledger_root()):
            raise ConfigError(f"{params.ledger_root()}: a zipped OME-Zarr is written once and not added to; "
                              "run this step on the folder store before it is zipped (or write the pyramid in "
                              "the step that makes the .ozx: ingest pyramid: true, reshard)")
        return None
    out = getattr(params, "output", None)  # as written: output_path() would open an existing archive
    if out is None or not is_ozx(out):
        return None
    if on_disk(out) is None:
        raise ConfigError(f"{out}: .ozx outputs are written to a local path (the zip is packed in one pass on "
                          "disk); write it here, then copy the file to the bucket")
    return Path(os.path.abspath(out))


def build_root(target: Path) -> Path:
    return bookkeeping_dir(target) / BUILD


def run_ozx_step(run_step: Callable[..., Any], step: str, task: Any, params: TaskParams, get_client: Any,
                 opts: Any) -> Any:
    """``run_step`` into the build store, then the build store packed into the target."""
    target = ozx_target(params)
    build = build_root(target)
    _check_target(target, build, params)
    book = bookkeeping_dir(target)
    make_own_folder(book, "bookkeeping folder")  # judged before the build store is made inside it
    if (book / DONE).exists() and not target.exists() and not (book / PACKED).exists():
        opts.upstream_changed = True  # the archive was removed since: the step is made again
    base = opts.provenance
    if base is not None:  # provenance names the .ozx and its parameters, not the build store
        opts.provenance = lambda name, task_name, _p, owner: base(name, task_name, params, owner, root=build)
    report = run_step(step, task, params.model_copy(update={"output": str(build)}), get_client, opts)
    pack(build, target, fresh=not report.was_done)  # a step (re)made: any archive in the making is not of it
    return report


def _check_target(target: Path, build: Path, params: TaskParams) -> None:
    """Before anything is read or written: the target is no input, and a file there is an archive
    zarrmill packed from this build store."""
    for inp in params.input_paths():
        where = os.path.abspath(inp) if on_disk(inp) is not None else ""
        if where == str(target) or where.startswith(str(target) + os.sep):
            raise UnsafeOutputError(f"{target}: the output is (or holds) the input {inp}; choose a new output file")
    if os.path.lexists(target) and not _packed_here(target, build):
        raise UnsafeOutputError(f"{target}: exists and zarrmill did not write it here, so it is never replaced; "
                                "choose a new output file, or move it away yourself")


def _packed_here(target: Path, build: Path) -> bool:
    if target.is_symlink() or not target.is_file():
        return False
    owner = _owner_id(build)
    return owner is not None and archive_owner(target) == owner


def _owner_id(build: Path) -> str | None:
    path = bookkeeping_dir(build) / OWNER_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("id") if isinstance(doc, dict) and doc.get("tool") == "zarrmill" else None


def archive_owner(path: Path) -> str | None:
    """The owner id the archive's root ``zarr.json`` records (its provenance), or None."""
    try:
        with zipfile.ZipFile(path) as zf:
            doc = json.loads(zf.read(METADATA))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    prov = ((doc.get("attributes") or {}).get("zarrmill") or {}).get("provenance") if isinstance(doc, dict) else None
    owner = prov.get("owner") if isinstance(prov, dict) else None
    return owner if isinstance(owner, str) else None


# -- packing ---------------------------------------------------------------------------------------
def pack(build: Path, target: Path, fresh: bool) -> None:
    book = bookkeeping_dir(target)
    partial, journal, done = book / PACKED, book / JOURNAL, book / DONE
    check_own_folder(book, "bookkeeping folder")
    guard = open_guard(build)
    guard.check()
    lock = open_lock(guard.lock_path)
    try:
        lock.acquire()
    except Locked as err:
        raise OutputLockedError(f"{target}: another zarrmill run is writing this output ({err}); wait for it "
                                "to end, or choose another output") from None
    try:
        if fresh:  # the build store was (re)made: an earlier archive in the making is not of it
            for path in (partial, journal, done):
                remove_bookkeeping(path)  # under the lock: another run's archive in the making is never cut
        _pack_locked(build, target, guard, partial, journal, done)
    finally:
        lock.release()


def _pack_locked(build: Path, target: Path, guard: OutputGuard, partial: Path, journal: Path, done: Path) -> None:
    if not done.exists():
        writer = ZipWriter(partial, journal)
        sources: dict[str, Path] = {}
        try:
            batch, since = 0, time.monotonic()
            for name, path in archive_order(build):
                if name in writer.names:  # packed before a kill: its file may still be there
                    _remove_packed(guard, [path])
                    continue
                batch += writer.add(name, path).size
                sources[name] = path
                if batch >= COMMIT_BYTES or time.monotonic() - since >= COMMIT_SECONDS:
                    _remove_packed(guard, [sources.pop(e.name) for e in writer.commit()])  # durable: the files go
                    batch, since = 0, time.monotonic()
            _remove_packed(guard, [sources.pop(e.name) for e in writer.commit()])
        except BaseException:
            writer.abandon()
            raise
        writer.close(archive_comment(build))
        _write_own(done, b"packed\n")
    if os.path.lexists(partial):
        os.close(open_regular(partial))  # the archive this run packed: the running user's, one name, no link
        replace_archive(partial, target, build)  # complete and synced: only now does the target change
        _sync_folder(target.parent)
    _empty_build(build, guard)


def replace_archive(partial: Path, target: Path, build: Path) -> None:
    """The complete archive onto the target, checked again at this moment (under the build store's
    lock): the target is absent, or an archive packed from this build store. Anything else put
    there since the run began (a folder, a link, someone's zip) is refused and left as it is."""
    never_delete(target)
    if os.path.lexists(target) and not _packed_here(target, build):
        raise UnsafeOutputError(f"{target}: appeared while the archive was packed and zarrmill did not write it, so "
                                f"it is never replaced; the archive is in {partial}: move it yourself, or rerun "
                                "with another output")
    replace_file(partial, target)


def _remove_packed(guard: OutputGuard, paths: list[Path]) -> None:
    """Chunk and shard files once their entries are durable in the archive (metadata stays till the end)."""
    guard.remove_files(p for p in paths if p.name != METADATA and os.path.lexists(p))


def archive_order(build: Path) -> list[tuple[str, Path]]:
    """(entry name, file): every ``zarr.json`` breadth-first, the root's first, then the other files.
    Walked without following links; a link or special file in the build is refused, naming it."""
    meta: list[tuple[int, str, Path]] = []
    other: list[tuple[str, Path]] = []
    check_own_folder(build, "build store", marked=False)
    for folder, rel, files in walk_regular(build):
        for name in files:
            entry = f"{rel}/{name}" if rel else name
            if name == METADATA:
                meta.append((entry.count("/"), entry, Path(folder) / name))
            elif not (not rel and name.startswith(".zarrmill")):  # the store's claim file is not data
                other.append((entry, Path(folder) / name))
    return [(e, p) for _, e, p in sorted(meta)] + other


def archive_comment(build: Path) -> bytes:
    """RFC-9: the OME-Zarr version as JSON, NUL-terminated (the archive follows its recommendations)."""
    try:
        version = json.loads((build / METADATA).read_text())["attributes"]["ome"]["version"]
    except (OSError, KeyError, ValueError, TypeError):
        return b""
    return json.dumps({"ome": {"version": version}}).encode() + b"\0"


def _empty_build(build: Path, guard: OutputGuard) -> None:
    """Everything but the root ``zarr.json`` (it names the owner: the ledger stays valid)."""
    for folder, dirs, files in reversed(list(walk(build))):  # deepest first, never through a link
        for name in files:
            path = Path(folder) / name
            if path != build / METADATA:
                guard.remove(path)
        for name in dirs:
            remove_empty_folder(Path(folder) / name)  # emptied above; anything else in it stops here


def _write_own(path: Path, data: bytes) -> None:
    fd = open_own_file(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
