"""The object-store requests zarrmill's bookkeeping and guard make, each literal and each one
request where S3 allows it:

- a PUT of a whole object, create-only (``If-None-Match: *``) or replace-if-unchanged
  (``If-Match: <ETag>``); a refused condition is recognised as AWS, MinIO and Ceph RGW answer it
  (412 or 409, with or without a ``Condition`` element), not by one client's translation of it;
- a GET; a LIST of one key (``MaxKeys``) to tell whether a prefix holds anything; a full listing
  only where every key is needed;
- deletes of literal keys, batched (``DeleteObjects``, 1000 a request): never a pattern, never a
  prefix-wide delete, so ``run*`` or ``exp[1]`` can never reach a look-alike prefix.

Keys are ``bucket/key`` as s3fs names them (location.key_of)."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Iterable

from .kinds.s3 import s3_client
from .location import JsonValue, Location, is_remote, key_of

if TYPE_CHECKING:
    from obstore.store import S3Store
    from s3fs import S3FileSystem

DELETE_BATCH = 1000  # S3's limit per DeleteObjects request
CONDITION_STATUS = (409, 412)  # AWS: 412 PreconditionFailed, 409 ConditionalRequestConflict; MinIO, Ceph alike
CONDITION_CODES = ("PreconditionFailed", "ConditionalRequestConflict")


class ConditionFailed(Exception):
    """A conditional write was refused: the object exists (create-only) or changed (If-Match)."""


def _split(key: str) -> tuple[str, str]:
    bucket, _, rest = key.partition("/")
    return bucket, rest


def _fs(path: Location) -> S3FileSystem:
    return path.fs


def condition_refused(err: BaseException) -> bool:
    """The server refused a write's condition: HTTP 409 or 412, or one of the codes S3 servers
    give it, however the client wrapped the answer."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            code = (response.get("Error") or {}).get("Code")
            if status in CONDITION_STATUS or code in CONDITION_CODES:
                return True
        err = err.__cause__ or err.__context__
    return False


def put(path: Location, data: bytes, create_only: bool = False, if_match: str | None = None) -> str:
    """One PUT of a whole object; returns its ETag. ``create_only``: ConditionFailed if it exists;
    ``if_match``: ConditionFailed unless its ETag is still that one."""
    bucket, key = _split(key_of(path))
    conditions: dict[str, str] = {}
    if create_only:
        conditions["IfNoneMatch"] = "*"
    if if_match is not None:
        conditions["IfMatch"] = if_match
    try:
        out = _fs(path).call_s3("put_object", Bucket=bucket, Key=key, Body=data, **conditions)
    except Exception as err:  # noqa: BLE001 - a refused condition is an answer, everything else is raised
        if conditions and condition_refused(err):
            raise ConditionFailed(key_of(path)) from None
        raise
    return str(out.get("ETag", ""))


def get(path: Location) -> bytes | None:
    """The object's bytes, or None when there is none (one GET)."""
    try:
        return _fs(path).cat_file(key_of(path))
    except FileNotFoundError:
        return None


def head(path: Location) -> dict | None:
    """The object's ETag and age in seconds (``{"etag", "age"}``, one HEAD), or None when there is
    none. The age compares the server's clock with this host's."""
    import datetime

    bucket, key = _split(key_of(path))
    try:
        out = _fs(path).call_s3("head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    modified = out.get("LastModified")
    age = (datetime.datetime.now(datetime.timezone.utc) - modified).total_seconds() if modified else 0.0
    return {"etag": str(out.get("ETag", "")), "age": age}


def put_file(path: Location, local: os.PathLike[str]) -> None:
    """A local file as one object (s3fs sends a large one in parts, each retried on its own)."""
    _fs(path).put_file(os.fspath(local), key_of(path))


def get_file(path: Location, local: os.PathLike[str]) -> None:
    """An object into a local file (in parts when large)."""
    _fs(path).get_file(key_of(path), os.fspath(local))


PUTS_AT_ONCE = 16  # as the PUT floor of tests/bench/bench_object_store.py


def put_many(objects: dict[Location, bytes]) -> None:
    """Whole objects, many PUTs in flight at once, e.g. a table's dozens of small files. Through
    obstore's client (the bucket's, shared with zarr): s3fs spends several ms of Python on each
    request, which made a plate's 200 table files 1.4 s of a 7 s run (moto; GIL-bound)."""
    if not objects:
        return
    import asyncio

    import obstore

    targets = [(*s3_client(str(path)), data) for path, data in objects.items()]

    async def send() -> None:
        gate = asyncio.Semaphore(PUTS_AT_ONCE)

        async def one(client: S3Store, key: str, data: bytes) -> None:
            async with gate:
                await obstore.put_async(client, key, data)

        await asyncio.gather(*(one(*target) for target in targets))

    asyncio.run(send())  # its own loop: callers are plain threads (finish, or each_node's)


def keys_under(path: Location) -> list[str]:
    """Every object key at or under ``path`` (``bucket/key`` form), listed fresh: the object
    ``path`` itself and everything below ``path/``, never a look-alike ``path-x``."""
    bucket, key = _split(key_of(path))
    found: list[str] = []
    token: str | None = None
    while True:
        args: dict[str, str] = {"Bucket": bucket, "Prefix": key}
        if token:
            args["ContinuationToken"] = token
        page = _fs(path).call_s3("list_objects_v2", **args)
        found += [f"{bucket}/{o['Key']}" for o in page.get("Contents", [])
                  if o["Key"] == key or o["Key"].startswith(key + "/")]
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return sorted(found)


def first_keys(path: Location, n: int = 1) -> list[str]:
    """Up to ``n`` keys under ``path/`` (one LIST request, ``MaxKeys=n``)."""
    bucket, key = _split(key_of(path))
    page = _fs(path).call_s3("list_objects_v2", Bucket=bucket, Prefix=key + "/" if key else "", MaxKeys=n)
    return [f"{bucket}/{o['Key']}" for o in page.get("Contents", [])]


def has_objects(path: Location) -> bool:
    """Objects under ``path/`` (a node: a group, an array, a table): one LIST request for one key."""
    return bool(first_keys(path, 1))


def delete_keys(path: Location, keys: Iterable[str]) -> None:
    """Delete exactly these keys (``bucket/key``), in batches of DeleteObjects; nothing is expanded."""
    by_bucket: dict[str, list[str]] = {}
    for full in keys:
        bucket, key = _split(full)
        if key:
            by_bucket.setdefault(bucket, []).append(key)
    fs = _fs(path)
    for bucket, names in by_bucket.items():
        for start in range(0, len(names), DELETE_BATCH):
            batch = names[start:start + DELETE_BATCH]
            out = fs.call_s3("delete_objects", Bucket=bucket,
                             Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            errors = [e for e in out.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise OSError(f"s3://{bucket}/{errors[0].get('Key')}: delete refused ({errors[0].get('Code')}: "
                              f"{errors[0].get('Message')})")
    fs.invalidate_cache()


def json_bytes(doc: JsonValue) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()


def server_failure(root: Location, err: BaseException) -> str | None:
    """The one line for ``err`` when it is the failure of the server holding ``root`` (connection,
    refusal, timeout), however it is wrapped; None for anything else (and for a local ``root``)."""
    if not is_remote(root):
        return None
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        module = type(cause).__module__ or ""
        if module.split(".")[0] in ("botocore", "aiobotocore", "aiohttp", "s3fs", "urllib3") or isinstance(
                cause, (ConnectionError, TimeoutError, PermissionError)):
            return describe_access_error(root, err)
        cause = cause.__cause__ or cause.__context__
    return None


def describe_access_error(root: Location, err: BaseException) -> str:
    """One line for an S3 error before any work: which bucket, what went wrong, what to do."""
    text = f"{type(err).__name__}: {err}"
    bucket = key_of(root).split("/", 1)[0]
    lowered = text.lower()
    if "nosuchbucket" in lowered or "specified bucket does not exist" in lowered:
        return f"{root}: bucket {bucket!r} does not exist (create it, or check the bucket name and endpoint)"
    if any(s in lowered for s in ("nocredentials", "unable to locate credentials", "no s3 credentials found")):
        return (f"{root}: no S3 credentials found for bucket {bucket!r} (set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or storage: {anonymous: true} for a public bucket)")
    if isinstance(err, PermissionError) or any(s in lowered for s in (
            "invalidaccesskeyid", "signaturedoesnotmatch", "signature we calculated", "not exist in our records",
            "accessdenied", "access denied", "forbidden", "403")):
        return (f"{root}: the S3 server refused the credentials for bucket {bucket!r} (set AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE for this endpoint)")
    if any(s in lowered for s in ("connect", "endpoint", "timeout", "name or service", "unreachable")):
        from .secrets import redact

        endpoint = redact(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS's default")
        return f"{root}: cannot reach the S3 endpoint {endpoint} ({type(err).__name__}); check AWS_ENDPOINT_URL_S3"
    from .secrets import redact

    return f"{root}: S3 error ({type(err).__name__}: {redact(str(err))[:200]})"


def probe_prefix(root: Location, n: int = 2) -> list[str]:
    """The first keys under the output prefix, in one LIST that also proves the bucket exists and
    these credentials may list the prefix (prefix-only policies allow it; a bucket-root listing
    would be refused): one line otherwise, before any work."""
    from ...errors import ConfigError

    try:
        return first_keys(root, n)
    except FileNotFoundError as err:
        raise ConfigError(describe_access_error(root, err if "bucket" in str(err).lower() else
                                                Exception("NoSuchBucket"))) from None
    except Exception as err:  # noqa: BLE001 - every client error becomes the one line above
        raise ConfigError(describe_access_error(root, err)) from None
