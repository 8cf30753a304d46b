"""Run folders (worker working directory, dask scratch, batch job logs, a run's TLS files) live in one
place: ``$ZARRMILL_RUNS_DIR``, else ``$XDG_STATE_HOME/zarrmill/runs``, else
``~/.local/state/zarrmill/runs`` (a home folder is shared with the compute nodes on most clusters,
which batch workers need). ``executor.run_dir`` picks one folder for one workflow.
Each run that makes a run folder there first prunes the folders not used for
``$ZARRMILL_RUNS_KEEP_DAYS`` days (default 14), and beyond the newest ``KEEP_NEWEST`` those not used
for a day; ``zarrmill runs --prune`` removes old ones at once. Only folders zarrmill marked as its
own are removed."""
from __future__ import annotations

import os
import time
from pathlib import Path

from ...io.storage.guard import remove_bookkeeping

MARKER = ".zarrmill-run"  # one of the output guard's BOOKKEEPING_MARKERS
KEEP_DAYS = 14.0  # run folders unused this long are pruned when a new one is made
KEEP_NEWEST = 50  # beyond this many, folders unused for a day are pruned too


def runs_root() -> Path:
    if os.environ.get("ZARRMILL_RUNS_DIR"):
        return Path(os.environ["ZARRMILL_RUNS_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "zarrmill" / "runs"


def make_run_dir(path: Path) -> None:
    if not path.exists() and path.parent == runs_root():
        prune_by_default(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # the user's alone: worker logs (paths, host names, tracebacks) and the run's TLS key
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    (path / MARKER).touch()


def keep_days() -> float:
    """Days a run folder is kept unused (at least one: a live run's folder is never that quiet)."""
    try:
        return max(float(os.environ.get("ZARRMILL_RUNS_KEEP_DAYS", KEEP_DAYS)), 1.0)
    except ValueError:
        return KEEP_DAYS


def prune_by_default(root: Path) -> list[Path]:
    """What a new run folder prunes first (module doc); a folder that cannot be removed stays."""
    try:
        removed = prune(keep_days(), root)
        marked = [f for f in sorted(root.iterdir()) if f.is_dir() and not f.is_symlink() and (f / MARKER).is_file()]
        by_use = sorted(marked, key=_newest, reverse=True)
        cutoff = time.time() - 86400
        for folder in by_use[KEEP_NEWEST:]:
            if _newest(folder) < cutoff:
                remove_bookkeeping(folder)
                removed.append(folder)
    except OSError:
        return []
    return removed


def prune(older_than_days: float, root: Path | None = None) -> list[Path]:
    """Remove run folders (marked as zarrmill's) not touched for ``older_than_days``."""
    root = root or runs_root()
    cutoff = time.time() - older_than_days * 86400
    removed = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        marker = folder / MARKER
        if folder.is_dir() and not folder.is_symlink() and marker.is_file() and _newest(folder) < cutoff:
            remove_bookkeeping(folder)
            removed.append(folder)
    return removed


def _newest(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if not p.is_symlink()), default=folder.stat().st_mtime)
