"""An S3 bucket (``s3://bucket/prefix``), or any S3-compatible store at the endpoint AWS tools are
told of: read and written, through one obstore client per bucket and settings (zarr's
``ObjectStore`` for arrays, the same client for bookkeeping objects: its connections are reused).
Credentials come from botocore's chain, never from a parameter."""
from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING

from ....errors import ConfigError
from .base import SERVER, StorageKind

if TYPE_CHECKING:
    from obstore.store import S3Store
    from zarr.abc.store import Store
    from zarr.storage import StorePath

# glob characters (a pattern can reach look-alike prefixes) and the characters AWS asks to avoid,
# which obstore percent-escapes where s3fs does not (the same URL would name two keys)
UNSAFE_KEY_CHARS = set('*?[]{}^%`"<>#|~\\')


class S3(StorageKind):
    name, schemes, traits, rank = "S3 bucket", ("s3",), SERVER, 10
    shown, hint = "s3://bucket/prefix", "set the S3 endpoint for other S3-compatible stores"
    place, backend, bookkeeping = ".place_bucket:BucketPlace", ".backend:ObjectBackend", ".place_bucket:bucket_bookkeeping"

    def check(self, text: str, write: bool, what: str) -> None:
        bucket, _, key = text[len("s3://"):].partition("/")
        if not bucket or not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise ConfigError(f"{text}: {what} needs a valid bucket name (3-63 lower-case letters, digits, '.', '-')")
        if write and not key.strip("/"):
            raise ConfigError(f"{text}: {what} names a whole bucket; give a prefix, e.g. s3://{bucket}/plate.ome.zarr")
        odd = sorted(set(key) & UNSAFE_KEY_CHARS) or [c for c in key if ord(c) < 32][:1]
        if odd:
            raise ConfigError(f"{text}: {what} has {' '.join(repr(c) for c in odd)} in its key; zarrmill refuses S3 keys "
                              "with pattern or special characters (* ? [ ] { } ^ % ` \" < > # | ~ \\), which one "
                              "client reads as a pattern and another escapes: rename the prefix")

    def zarr_path(self, scheme: str, rest: str) -> StorePath:
        """A ``StorePath`` at the node over zarr's ``ObjectStore`` on obstore (measured against zarr's
        fsspec store on the same server: it asks for a shard's index with one suffix-range GET, where
        s3fs first asks the object's size, and a missing chunk costs one request instead of three),
        rooted at the node as on disk: zarr creates no parent above it (prefixed_store.py)."""
        import zarr.storage

        from ..prefixed_store import PrefixedStore

        bucket, _, prefix = rest.partition("/")
        store = _zarr_store(bucket)
        return zarr.storage.StorePath(PrefixedStore(store, prefix, _CLIENTS[_client_key(bucket)]), "")

    def reset(self) -> None:
        _STORES.clear()
        _CLIENTS.clear()


def s3_client(url: str) -> tuple[S3Store, str]:
    """The obstore client of ``url``'s bucket (the one zarr's store of that bucket uses) and the key
    of ``url`` inside the bucket."""
    bucket, _, key = url.split("://", 1)[1].partition("/")
    _zarr_store(bucket)
    return _CLIENTS[_client_key(bucket)], key.strip("/")


def _zarr_store(bucket: str) -> Store:
    import zarr.storage

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
            raise ConfigError("no S3 credentials found (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
        frozen = creds.get_frozen_credentials()
        out: dict[str, object] = {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                               "expires_at": datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=15)}
        if frozen.token:
            out["token"] = frozen.token
        return out


KIND = S3()
