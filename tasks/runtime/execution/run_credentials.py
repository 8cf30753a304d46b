"""The TLS credentials of one batch run: made for it, written into its run folder (which the workers
share) readable by the user only, and deleted when the run ends.

The scheduler listens on the cluster network, where anyone could otherwise submit code to the
workers, so scheduler, workers and client talk TLS. distributed's ``Security.temporary()`` makes a
key and a self-signed certificate in memory; zarrmill writes them as files of its own, and hands
dask-jobqueue their paths (given in-memory keys it writes temp files itself, which it deletes only
when the cluster object is collected: never, in a process that ends with ``os._exit``, and so the
keys of every run stayed in the user's home)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

# stands for "make credentials for this run" in a pool's keywords until start_pool writes them
RUN_CREDENTIALS = "zarrmill-run-credentials"
PREFIX = ".zarrmill-tls-"  # the files' names in the run folder: PREFIX + random + .key / .pem


def write_run_credentials(run_dir: Path, written: list[Path]) -> Any:
    """A ``Security`` whose key and certificate (also the authority: it is self-signed) are files
    in ``run_dir``, created new (never through a link or over a file), mode 0600; their paths are
    appended to ``written`` as each is made (what ``remove_run_credentials`` removes)."""
    from distributed.security import Security

    made = Security.temporary().get_tls_config_for_role("worker")
    stem = f"{PREFIX}{uuid.uuid4().hex[:12]}"
    key, cert = run_dir / f"{stem}.key", run_dir / f"{stem}.pem"
    for path, text in ((key, made["key"]), (cert, made["cert"])):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        written.append(path)
        with open(fd, "w", encoding="ascii") as fh:
            fh.write(text)
    files = {f"tls_{role}_{what}": str(path) for role in ("client", "scheduler", "worker")
             for what, path in (("key", key), ("cert", cert))}
    return Security(tls_ca_file=str(cert), require_encryption=True, **files)


def placeholder_credentials(run_dir: Path) -> Any:
    """What a printed job script names before the run made its files (``--dry-run``)."""
    from distributed.security import Security

    stem = run_dir / f"{PREFIX}RANDOM"
    return Security(tls_ca_file=f"{stem}.pem", tls_worker_cert=f"{stem}.pem", tls_worker_key=f"{stem}.key")


def remove_run_credentials(written: list[Path]) -> list[str]:
    """Delete the key and certificate files this run wrote (through the guard of bookkeeping
    files; another run's in a shared run folder stay); the names of those that could not be."""
    from ...io.storage.paths import remove_bookkeeping

    left = []
    for path in written:
        try:
            remove_bookkeeping(path)
        except OSError:
            left.append(str(path))
    written.clear()
    return left
