"""A web server: ``https://`` (and plain ``http://`` from this machine only), read only, through
obstore's HTTP store."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ....errors import ConfigError
from .base import SERVER, StorageKind

if TYPE_CHECKING:
    from zarr.storage import StorePath


class Web(StorageKind):
    name, schemes, traits, rank, shown = "web server", ("https", "http"), replace(SERVER, lists=False), 20, "https://"

    def check(self, text: str, write: bool, what: str) -> None:
        if text.lower().startswith("http:") and not _loopback(text):
            raise ConfigError(f"{text}: plain http:// is read only from this machine (127.0.0.1, localhost); "
                              "use https://")

    def zarr_path(self, scheme: str, rest: str) -> StorePath:
        import zarr.storage
        from obstore.store import HTTPStore

        host, _, prefix = rest.partition("/")
        store = HTTPStore.from_url(f"{scheme}://{host}", client_options={"allow_http": True} if scheme == "http" else None)
        return zarr.storage.StorePath(zarr.storage.ObjectStore(store), prefix.strip("/"))


def _loopback(url: str) -> bool:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


KIND = Web()
