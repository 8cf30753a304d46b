"""Where a store lives: a local folder, an S3 bucket (``s3://bucket/prefix``: read and write) or a
web server (``https://...``: read only). One face for all of them: a local location is a
``pathlib.Path``, a remote one a ``upath.UPath`` (the same operations over fsspec: ``/``,
``exists``, ``read_bytes``, ``iterdir``), so tasks join names and read files without asking where
the store is. Only the output guard, the ledger, locks and atomic writes differ by kind, each in
one place (object_store.py).

The endpoint and credentials come from where AWS tools look for them (``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws``)
and from a workflow's ``storage:`` block (endpoint, region, profile, anonymous), which sets the same
variables for the run; a secret is never a parameter, so it never lands in provenance, a ledger, a
log or a job script. A URL of any other scheme is one line, never a local path: ``Path("s3://b/x")``
is the local folder ``s3:/b/x``."""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ...errors import ConfigError
from .ozx_path import OzxPath, split_ozx

SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
WRITABLE = ("s3",)
READABLE = ("s3", "https", "http")
# a path a user typed with one slash where two belong: Path() turned s3://b into s3:/b on the way
COLLAPSED = re.compile(r"^(s3|gs|gcs|az|abfs|https?):/[^/]")

# S3 keys: glob characters (a pattern can reach look-alike prefixes) and the characters AWS asks to
# avoid, which obstore percent-escapes where s3fs does not (the same URL would name two keys)
UNSAFE_KEY_CHARS = set('*?[]{}^%`"<>#|~\\')

if TYPE_CHECKING:
    from upath import UPath
    from obstore.store import S3Store
    from zarr.abc.store import Store
    from zarr.storage import StorePath

Location = Union[Path, "UPath", OzxPath]  # a local path, a bucket's or web server's (UPath), an archive's entry
Where = Union[str, "os.PathLike[str]", Location]  # what callers may name a location by
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]


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


def is_remote(path: object) -> bool:
    return scheme_of(path) is not None


@dataclass(frozen=True)
class Traits:
    """What a kind of storage offers: callers outside io/storage ask for what they need (a local
    path to memory-map, how often to record) and never where the data is."""

    local: bool  # a file system of this machine: memory maps, folder walks, appends, renames
    whole_writes: bool  # every write lands whole or not at all (a PUT): no temp file is ever left
    writes_are_requests: bool  # each write is a round trip to a server: small records are batched more
    server_may_be_gone: bool  # cleaning up after a failure may fail too; the next run finishes it


DISK = Traits(local=True, whole_writes=False, writes_are_requests=False, server_may_be_gone=False)
SERVER = Traits(local=False, whole_writes=True, writes_are_requests=True, server_may_be_gone=True)


def traits_of(path: Where) -> Traits:
    return SERVER if is_remote(path) else DISK


def on_disk(path: Where) -> Path | OzxPath | None:
    """``path`` as a local ``Path``, or None where it names a bucket or web server (for what only a
    local file system offers: memory maps, scanning a folder by its file names)."""
    if is_remote(path):
        return None
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
    if scheme not in READABLE:
        raise ConfigError(f"{text}: {what} uses {scheme}://, which zarrmill does not serve; it reads and writes "
                          "local paths and s3://bucket/prefix, and reads https:// (set the S3 endpoint for other "
                          "S3-compatible stores)")
    if write and scheme not in WRITABLE:
        raise ConfigError(f"{text}: {what} is {scheme}://, which zarrmill only reads; write to a local path or "
                          "s3://bucket/prefix")
    if scheme == "http" and not _loopback(str(text)):
        raise ConfigError(f"{text}: plain http:// is read only from this machine (127.0.0.1, localhost); use https://")
    if scheme == "s3":
        bucket, _, key = str(text)[len("s3://"):].partition("/")
        if not bucket or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise ConfigError(f"{text}: {what} needs a valid bucket name (3-63 lower-case letters, digits, '.', '-')")
        if write and not key.strip("/"):
            raise ConfigError(f"{text}: {what} names a whole bucket; give a prefix, e.g. s3://{bucket}/plate.ome.zarr")
        odd = sorted(set(key) & UNSAFE_KEY_CHARS) or [c for c in key if ord(c) < 32][:1]
        if odd:
            raise ConfigError(f"{text}: {what} has {' '.join(repr(c) for c in odd)} in its key; zarrmill refuses S3 keys "
                              "with pattern or special characters (* ? [ ] { } ^ % ` \" < > # | ~ \\), which one "
                              "client reads as a pattern and another escapes: rename the prefix")


def _loopback(url: str) -> bool:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


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

    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
    _STORES.clear()
    _CLIENTS.clear()


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
    """What zarr-python opens for ``path``: the path itself on disk; in a bucket, a ``StorePath``
    at that node over zarr's ``ObjectStore`` on obstore (measured against zarr's fsspec store on
    the same server: it asks for a shard's index with one suffix-range GET, where s3fs first asks
    the object's size, and a missing chunk costs one request instead of three). One client per
    bucket and settings for the whole process, however many arrays are opened."""
    if not is_remote(path):
        inside = split_ozx(str(path))
        return _zip_store_path(*inside) if inside else str(path)
    import zarr.storage

    scheme, rest = str(path).split("://", 1)
    bucket, _, prefix = rest.partition("/")
    store = _zarr_store(scheme, bucket)
    if scheme in ("http", "https"):  # read only: nothing is created there
        return zarr.storage.StorePath(store, prefix.strip("/"))
    from .prefixed_store import PrefixedStore

    # rooted at the node, as on disk: zarr creates no parent above it (prefixed_store.py)
    return zarr.storage.StorePath(PrefixedStore(store, prefix, _CLIENTS[_client_key(bucket)]), "")


def in_bucket(arr: object) -> bool:
    """An array zarr_url opened in a bucket (its store is the node-rooted one made above)."""
    from .prefixed_store import PrefixedStore

    return isinstance(getattr(arr, "store", None), PrefixedStore)


def _zip_store_path(archive: Path, inner: str) -> StorePath:
    """A node inside an ``.ozx``: zarr-python's ``ZipStore`` over the archive, read only (one per
    archive and process, opened again when the archive was rewritten)."""
    import asyncio

    import zarr.storage

    st = archive.stat()
    key = (str(archive), st.st_mtime_ns, st.st_size)
    if key not in _ZIP_STORES:  # opened here: zarr opens a store only when it makes the StorePath itself
        _ZIP_STORES[key] = asyncio.run(zarr.storage.ZipStore.open(archive, mode="r"))
    return zarr.storage.StorePath(_ZIP_STORES[key], inner)


_ZIP_STORES: dict[tuple[str, int, int], Store] = {}


def _zarr_store(scheme: str, bucket: str) -> Store:
    import zarr.storage

    if scheme in ("http", "https"):
        from obstore.store import HTTPStore

        return zarr.storage.ObjectStore(HTTPStore.from_url(
            f"{scheme}://{bucket}", client_options={"allow_http": True} if scheme == "http" else None))
    key = _client_key(bucket)
    with _CLIENTS_LOCK:  # upload threads open stores too: one client and its store per key
        if key not in _STORES:
            _CLIENTS[key] = _s3_store(bucket, *key[1:5])
            _STORES[key] = zarr.storage.ObjectStore(_CLIENTS[key])
        return _STORES[key]


def _client_key(bucket: str) -> tuple[str | bool, ...]:
    """(bucket, endpoint, region, profile, anonymous, access key, attempts): a client per each."""
    return (bucket, os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "",
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "",
            os.environ.get("AWS_PROFILE") or "", os.environ.get("FSSPEC_S3_ANON", "") == "true",
            os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_MAX_ATTEMPTS", ""))


_STORES: dict[tuple[str | bool, ...], Store] = {}  # (bucket, settings) -> zarr ObjectStore: one client each
_CLIENTS: dict[tuple[str | bool, ...], S3Store] = {}  # the obstore client inside each (our own reference)
_CLIENTS_LOCK = threading.Lock()


def s3_client(path: Location) -> tuple[S3Store, str]:
    """The obstore client of ``path``'s bucket (the one zarr's store of that bucket uses: its
    connections are reused) and the key of ``path`` inside the bucket."""
    bucket, _, key = str(path).split("://", 1)[1].partition("/")
    _zarr_store("s3", bucket)
    return _CLIENTS[_client_key(bucket)], key.strip("/")


def _s3_store(bucket: str, endpoint: str, region: str, profile: str, anonymous: bool) -> S3Store:
    """An obstore S3 client for the whole bucket; credentials from botocore's chain (environment,
    AWS_PROFILE, ~/.aws, instance roles), as every AWS tool finds them."""
    from obstore.store import S3Store

    attempts = os.environ.get("AWS_MAX_ATTEMPTS", "")
    options: dict[str, object] = {"region": region or "us-east-1"}
    if attempts.isdigit() and int(attempts) >= 1:  # AWS_MAX_ATTEMPTS, as botocore reads it
        import datetime

        options["retry_config"] = {"max_retries": int(attempts) - 1, "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=100), "max_backoff": datetime.timedelta(seconds=15),
            "base": 2}, "retry_timeout": datetime.timedelta(minutes=3)}
    if endpoint:
        options["endpoint"] = endpoint
    client = {"allow_http": True} if endpoint.startswith("http://") else {}
    if anonymous:
        return S3Store(bucket, client_options=client, skip_signature=True, **options)
    return S3Store(bucket, client_options=client, credential_provider=_BotocoreCredentials(profile or None), **options)


class _BotocoreCredentials:
    """obstore's credential callback, answered by botocore's credential chain."""

    def __init__(self, profile: str | None):
        self.profile = profile

    def __call__(self) -> dict[str, object]:
        import datetime

        import botocore.session

        creds = botocore.session.Session(profile=self.profile).get_credentials()
        if creds is None:
            from ...errors import ConfigError

            raise ConfigError("no S3 credentials found (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
        frozen = creds.get_frozen_credentials()
        out: dict[str, object] = {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                               "expires_at": datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=15)}
        if frozen.token:
            out["token"] = frozen.token
        return out
