"""A unit's writes to a bucket in flight while it computes (io/storage/uploads.py), against moto's
real S3 server behind a proxy that delays or refuses PUTs (tests/s3_faults.py):

- the unit returns only once every write is stored (each PUT delayed: a unit that returned with
  uploads still on their way would leave chunks missing right after it);
- a write that fails fails the unit, and one failing while the unit itself fails leaves the unit's
  own error;
- empty chunks are not stored, and a chunk that became empty on a rerun is not served stale."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

from zarrmill.io.storage.arrays import open_for_write, write_region
from zarrmill.io.storage.location import as_location, reset_clients, zarr_url
from zarrmill.io.storage.uploads import writes_in_flight

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def through_proxy(s3env, monkeypatch):
    """Start a FaultyProxy in front of the server with the given faults; zarrmill's clients use it."""
    from s3_faults import FaultyProxy
    from s3_server import free_port

    started = []

    def start(**faults) -> FaultyProxy:
        proxy = FaultyProxy(s3env.port, free_port(), **faults).start()
        started.append(proxy)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        reset_clients()
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
    reset_clients()


def make_array(bucket: str, name: str = "a.zarr") -> str:
    url = f"s3://{bucket}/{name}"
    zarr.create_array(zarr_url(as_location(url)), shape=(2, 64, 64), chunks=(1, 16, 16), dtype="uint16", fill_value=0)
    return url


@writes_in_flight
def run_unit(url: str, data: np.ndarray) -> int:
    """A unit as tasks write them: open the output array, write a region, return the bytes."""
    write_region(open_for_write(as_location(url), sparse=True), (0, 0, 0), data)
    return data.nbytes


def pixels(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 60_000, (2, 64, 64), dtype=np.uint16)


def test_a_unit_returns_only_once_every_write_is_stored(s3env, bucket, through_proxy):
    url = make_array(bucket)
    through_proxy(put_delay=0.4)  # every chunk's PUT lands 0.4 s after it is sent
    data = pixels()
    assert run_unit(url, data) == data.nbytes
    # at once, from the server itself: all 32 chunks are there
    assert len(s3env.keys(f"{bucket}/a.zarr/c")) == 32
    reset_clients()
    assert np.array_equal(zarr.open_array(zarr_url(as_location(url)), mode="r")[...], data)


def test_a_failed_write_fails_the_unit(s3env, bucket, through_proxy):
    url = make_array(bucket)
    through_proxy(put_delay=0.2, refuse_puts="/c/1/3/3")  # the last chunk's PUT is refused
    with pytest.raises(Exception, match="(?i)denied|403|forbidden"):
        run_unit(url, pixels())


def test_a_unit_that_fails_waits_for_its_writes_and_raises_its_own_error(s3env, bucket, through_proxy):
    url = make_array(bucket)
    through_proxy(put_delay=0.3)

    @writes_in_flight
    def failing_unit() -> int:
        write_region(open_for_write(as_location(url), sparse=True), (0, 0, 0), pixels())
        raise ValueError("the unit's own error")

    with pytest.raises(ValueError, match="own error"):
        failing_unit()
    assert len(s3env.keys(f"{bucket}/a.zarr/c")) == 32  # nothing left running behind it


def test_empty_chunks_are_not_stored_and_a_chunk_that_became_empty_is_not_served_stale(s3env, bucket):
    url = make_array(bucket)
    data = pixels()
    data[0, :16, :16] = 0  # one empty chunk
    run_unit(url, data)
    keys = s3env.keys(f"{bucket}/a.zarr/c")
    assert len(keys) == 31 and not any(k.endswith("/c/0/0/0") for k in keys)
    again = pixels(2)
    again[1, 16:32, 16:32] = 0  # a rerun where another chunk is empty now
    run_unit(url, again)
    reset_clients()
    assert np.array_equal(zarr.open_array(zarr_url(as_location(url)), mode="r")[...], again)


def test_writes_to_one_shard_one_channel_at_a_time_keep_every_channel(s3env, bucket, through_proxy):
    """A well or overview composed one channel at a time writes each channel's part of a shard
    that spans all channels: each is a read, merge and put of the whole shard. Two in flight at
    once would each put back the shard without the other's channel (the first bug report: channel
    1 of an overview all zero, exit 0)."""
    url = f"s3://{bucket}/sharded.zarr"
    zarr.create_array(zarr_url(as_location(url)), shape=(3, 64, 64), chunks=(1, 32, 32), shards=(3, 64, 64),
                      dtype="uint16", fill_value=0)
    through_proxy(put_delay=0.3)  # every PUT late, as a busy server's: a race has time to show
    data = np.random.default_rng(3).integers(1, 60_000, (3, 64, 64), dtype=np.uint16)

    @writes_in_flight
    def channel_by_channel() -> None:
        arr = open_for_write(as_location(url), sparse=True)
        for c in range(3):
            write_region(arr, (c, 0, 0), data[c:c + 1].copy(), handed_over=True)

    channel_by_channel()
    reset_clients()
    assert np.array_equal(zarr.open_array(zarr_url(as_location(url)), mode="r")[...], data)
