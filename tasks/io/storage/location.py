"""Where a store lives: a local folder, an S3 bucket (``s3://bucket/prefix``: read and write) or a
web server (``https://...``: read only). One face for all of them: a local location is a
``pathlib.Path``, a remote one a ``upath.UPath`` (the same operations over fsspec: ``/``,
``exists``, ``read_bytes``, ``iterdir``), so tasks join names and read files without asking where
the store is. What differs by kind (the URL rules, how zarr opens a node, the output guard's place,
the bookkeeping backend) is declared by each kind in its module (kinds/).

The endpoint and credentials come from where AWS tools look for them (``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws``)
and from a workflow's ``storage:`` block (endpoint, region, profile, anonymous), which sets the same
variables for the run; a secret is never a parameter, so it never lands in provenance, a ledger, a
log or a job script. A URL of any other scheme is one line, never a local path: ``Path("s3://b/x")``
is the local folder ``s3:/b/x``."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ...errors import ConfigError
from .kinds import kind_of, write_to
from .kinds.base import Traits, is_upath, scheme_of  # noqa: F401 - callers ask location, not the kinds
from .ozx_path import OzxPath, split_ozx

# a path a user typed with one slash where two belong: Path() turned s3://b into s3:/b on the way
COLLAPSED = re.compile(r"^(s3|gs|gcs|az|abfs|https?):/[^/]")

if TYPE_CHECKING:
    from upath import UPath
    from zarr.storage import StorePath

Location = Union[Path, "UPath", OzxPath]  # a local path, a bucket's or web server's (UPath), an archive's entry
Where = Union[str, "os.PathLike[str]", Location]  # what callers may name a location by
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]


def is_remote(path: object) -> bool:
    return scheme_of(path) is not None


def traits_of(path: Where) -> Traits:
    return kind_of(path).traits


def written_there(path: Where) -> bool:
    """zarrmill writes (and keeps records) in this kind of storage; it only reads the others."""
    return kind_of(path).writable


def on_disk(path: Where) -> Path | OzxPath | None:
    """``path`` as a local ``Path``, or None where it names a bucket or web server (for what only a
    local file system offers: memory maps, scanning a folder by its file names)."""
    if is_remote(path):
        return kind_of(path).local_path(str(path))  # a kind whose data is on this machine says where
    return path if isinstance(path, (Path, OzxPath)) else Path(path)


def recorded_name(path: Where) -> str:
    """The name a record keeps of a location: a URL as given, a local path made absolute with its
    links resolved."""
    return str(as_location(path)) if is_remote(path) else str(Path(path).resolve())


def check_url(text: str, *, write: bool, what: str = "path") -> None:
    """One line for a URL zarrmill cannot serve (an unknown scheme, a read-only one as an output,
    an S3 URL without a bucket, a key with characters a pattern or a client would read otherwise,
    a credential in the URL); nothing for a local path."""
    from .secrets import refuse_secret_url

    refuse_secret_url(str(text), what)
    if COLLAPSED.match(str(text)):
        raise ConfigError(f"{text}: {what} looks like a URL with one '/' after the scheme; write it as "
                          f"{str(text).replace(':/', '://', 1)}")
    scheme = scheme_of(text)
    if scheme is None:
        return
    kind = kind_of(text, what)
    if write and not kind.writable:
        raise ConfigError(f"{text}: {what} is {scheme}://, which zarrmill only reads; write to {write_to()}")
    kind.check(str(text), write, what)


def as_location(path: Where) -> Location:
    """A local ``Path``, or a ``UPath`` for a URL (fsspec takes endpoint and credentials from the
    environment, as every AWS client does)."""
    if is_upath(path) or isinstance(path, OzxPath):
        return path
    if scheme_of(path) is None:
        inside = split_ozx(path)  # a path through an .ozx file: read inside the archive
        return OzxPath(*inside) if inside else Path(path)
    check_url(str(path), write=False)
    from upath import UPath

    return UPath(str(path).rstrip("/"))


def key_of(path: Location) -> str:
    """What the location's fsspec file system calls it: ``bucket/key`` for s3fs, the whole URL for
    http(s)."""
    text = str(path)
    return text.rstrip("/") if text.startswith(("http://", "https://")) else text.split("://", 1)[1].rstrip("/")


def location_key(path: Where) -> str:
    """A comparable name: the URL of a remote location, the absolute path of a local one."""
    return str(path).rstrip("/") if is_remote(path) else os.path.abspath(path)


def url_join(base: Location, *parts: str) -> Location:
    """``base / parts`` for either kind."""
    out = base
    for part in parts:
        out = out / part
    return out


def stored_bytes(path: Location) -> int:
    """Bytes held at ``path``: a file or object, or every file or object under a folder or prefix."""
    if is_remote(path):
        fs = path.fs
        fs.invalidate_cache()
        base = key_of(path)
        if fs.isfile(base):
            return int(fs.size(base))
        return sum(int(info["size"]) for info in fs.find(base + "/", detail=True).values())
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def reset_clients() -> None:
    """Forget S3 clients made earlier in this process: fsspec keeps one per set of options, with the
    endpoint and credentials it saw first."""
    import sys

    from .kinds import KINDS

    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
    for kind in KINDS:
        kind.reset()


def check_endpoint_environment() -> None:
    """The endpoints every S3 client reads from the environment (AWS_ENDPOINT_URL,
    AWS_ENDPOINT_URL_S3 and any other AWS_ENDPOINT_URL_<SERVICE>), refused like
    ``storage.endpoint`` when one carries a credential: it would be shown in every S3 error."""
    from .secrets import refuse_secret_url

    for name, value in sorted(os.environ.items()):
        if name.startswith("AWS_ENDPOINT_URL"):
            refuse_secret_url(value, f"{name} (environment variable)")


STORAGE_ENV = {"endpoint": ("AWS_ENDPOINT_URL_S3",), "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
               "profile": ("AWS_PROFILE",)}


def apply_storage_block(block: dict[str, JsonValue] | None) -> None:
    """A workflow's ``storage:`` block (endpoint, region, profile, anonymous) as the environment
    variables every S3 client reads, for this run and the workers it starts. Secrets are not
    accepted here: they stay where AWS tools keep them."""
    if not block:
        return
    allowed = set(STORAGE_ENV) | {"anonymous"}
    unknown = sorted(set(block) - allowed)
    if unknown:
        secret = [k for k in unknown if "key" in k.lower() or "secret" in k.lower() or "token" in k.lower()]
        if secret:
            raise ConfigError(f"storage: {', '.join(secret)} is a credential; workflow files never hold credentials: "
                              "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a profile in ~/.aws instead")
        raise ConfigError(f"storage: unknown setting {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    if block.get("endpoint"):
        from .secrets import refuse_secret_url

        refuse_secret_url(str(block["endpoint"]), "storage.endpoint")
    if "anonymous" in block and not isinstance(block["anonymous"], bool):
        raise ConfigError("storage: anonymous must be true or false")
    for key, names in STORAGE_ENV.items():
        if block.get(key):
            for name in names:
                os.environ[name] = str(block[key])
    if block.get("anonymous"):
        os.environ["FSSPEC_S3_ANON"] = "true"  # fsspec reads FSSPEC_<PROTOCOL>_<OPTION> at import (workers)
        import fsspec.config

        fsspec.config.conf.setdefault("s3", {})["anon"] = True  # and this process, imported already
    check_endpoint_environment()  # the block set AWS_ENDPOINT_URL_S3; AWS_ENDPOINT_URL may still hold one
    reset_clients()


def zarr_url(path: Where) -> str | StorePath:
    """What zarr-python opens for ``path``: the path itself on disk (or a node in an ``.ozx``); in a
    bucket or on a web server, a ``StorePath`` at that node made by its kind (kinds/)."""
    scheme, text = scheme_of(path), str(path)
    return kind_of(path).zarr_path(scheme, text.split("://", 1)[1] if scheme else text)


def in_bucket(arr: object) -> bool:
    """An array zarr_url opened in a bucket (its store is the node-rooted one the S3 kind makes)."""
    from .prefixed_store import PrefixedStore

    return isinstance(getattr(arr, "store", None), PrefixedStore)
