"""A zarr store rooted at one node of a bucket, over the bucket's shared client.

zarr-python, when it creates an array or group, checks and writes the group metadata of every
parent up to its store's root (``ensure_parents``). With a store rooted at the bucket that meant a
GET of every ancestor's ``zarr.json`` for each node created (about 30 each for 30 nodes) and a
``zarr.json`` written at the bucket's root: outside the output, in a bucket others share. Rooted at
the node, a bucket behaves as a folder on disk does (zarr opens ``str(path)`` there): zarr sees no
parents, asks nothing about them and writes nothing above the node. The client (its connections,
credentials) stays one per bucket: only keys are rewritten."""
from __future__ import annotations

from typing import TYPE_CHECKING, AsyncGenerator, AsyncIterator, Iterable

from zarr.storage import WrapperStore

if TYPE_CHECKING:
    from obstore.store import ObjectStore as ObjectStoreClient
    from zarr.abc.store import ByteRequest, Store
    from zarr.abc.buffer import Buffer, BufferPrototype  # the public ABCs (zarr.core is internal)


# One PUT per object below this (a multipart upload costs two more requests and one per part,
# 5 MB parts by default: 6 requests for a 15 MB shard); above it, parts of PART_BYTES sent together.
SINGLE_PUT_BYTES = 32 * 2**20
PART_BYTES = 16 * 2**20


class PrefixedStore(WrapperStore):
    def __init__(self, store: Store, prefix: str, client: ObjectStoreClient | None = None):
        super().__init__(store)
        self.prefix = prefix.strip("/")
        self.client = client  # obstore's client inside ``store`` (kinds/s3.py keeps it): writes choose their parts

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix and key else (self.prefix or key)

    def _strip(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    def with_read_only(self, read_only: bool = False) -> "PrefixedStore":
        return PrefixedStore(self._store.with_read_only(read_only), self.prefix, self.client)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrefixedStore) and other.prefix == self.prefix and other._store == self._store

    def __str__(self) -> str:
        return f"{self._store}/{self.prefix}"

    def __repr__(self) -> str:
        return f"PrefixedStore({self._store!r}, {self.prefix!r})"

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        return await self._store.get(self._key(key), prototype, byte_range)

    async def get_partial_values(self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
                                 ) -> list[Buffer | None]:
        return await self._store.get_partial_values(prototype, [(self._key(k), r) for k, r in key_ranges])

    async def exists(self, key: str) -> bool:
        return await self._store.exists(self._key(key))

    async def set(self, key: str, value: Buffer) -> None:
        if self.client is None:
            await self._store.set(self._key(key), value)
            return
        import obstore

        if self.read_only:
            raise ValueError("store was opened in read-only mode and does not support writing")
        await obstore.put_async(self.client, self._key(key), value.as_buffer_like(),
                                use_multipart=len(value) >= SINGLE_PUT_BYTES, chunk_size=PART_BYTES)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._store.set_if_not_exists(self._key(key), value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        for key, value in values:
            await self.set(key, value)

    async def _get_many(self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
                        ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def delete(self, key: str) -> None:
        await self._store.delete(self._key(key))

    async def list(self) -> AsyncIterator[str]:  # type: ignore[override]
        async for key in self._store.list_prefix(self._key("")):
            yield self._strip(key)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
        async for key in self._store.list_prefix(self._key(prefix)):
            yield self._strip(key)

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
        async for name in self._store.list_dir(self._key(prefix.rstrip("/"))):
            yield name

    async def delete_dir(self, prefix: str) -> None:
        await self._store.delete_dir(self._key(prefix.rstrip("/")))

    async def is_empty(self, prefix: str = "") -> bool:
        async for _ in self.list_prefix(prefix):
            return False
        return True

    async def clear(self) -> None:
        await self.delete_dir("")
