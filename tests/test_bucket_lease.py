"""A run lock (lease) in a bucket that is renewed and holds (#49), against a real S3 server on
127.0.0.1 (moto's, tests/s3_server.py), never a mock of a client:

- renewed over many heartbeats (If-Match PUTs), its ETag and beat move and a second run with a short
  stale time never judges it stale, nor takes it;
- two real processes on one output: the second, started well after the stale time, is refused while
  the first still writes, and the first finishes its store;
- a heartbeat that fails (the server gone, the lock rewritten or replaced behind its back) is a
  WARNING record and one stderr line, retried at the next beat; after ``stale_after`` without a beat
  that took (or at once, when another run's lock is in its place) the lease is lost."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zarrmill.runtime.core.locks import LeaseLost, Locked, open_lock

pytestmark = pytest.mark.timeout(120)
LOCK = ".p.ome.zarr.zarrmill/lock"  # beside the store: where the engine keeps an output's run lock


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_bucket_lease_is_renewed_and_never_judged_stale(bucket, s3env):
    url = f"s3://{bucket}/{LOCK}"
    first = open_lock(url, heartbeat=0.3, stale_after=1.5)
    first.acquire()
    try:
        other = open_lock(url, heartbeat=0.3, stale_after=1.5)  # a second run's view of the same lock
        etags, beats = set(), set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:  # well over twice the stale time
            version = other.backend.stat(other.name)
            info = other.holder()
            assert version is not None and info is not None and info["token"] == first.token
            assert not other.is_stale(info), f"judged stale {time.monotonic() - t0:.1f} s into a live lease"
            etags.add(version.token)
            beats.add(info["beat"])
            time.sleep(0.1)
        assert len(etags) >= 6 and len(beats) >= 6, (etags, beats)  # ~13 beats in 4 s
        with pytest.raises(Locked):
            other.acquire()  # 4 s after its creation the lock is still held
        assert not first.lost()
        first.check()
    finally:
        first.release()
    assert s3env.keys(f"{bucket}/.p.ome.zarr.zarrmill") == []


SLOW_RUN = """
import sys, time
from pathlib import Path
import zarrmill.generate as task

real = task.run_unit


def held(p, unit):  # the first unit waits for the test's word: the run holds its lock that long
    release = Path(sys.argv[1])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return real(p, unit)


task.run_unit = held
from zarrmill.runtime.front.cli import main

sys.exit(main(sys.argv[2:]))
"""


def test_a_second_process_is_refused_while_the_first_holds_the_lock_past_the_stale_time(tmp_path, bucket, s3env):
    stale = 1.0
    env = {**os.environ, **s3env.env(), "ZARRMILL_LOCK_HEARTBEAT_S": "0.2", "ZARRMILL_LOCK_STALE_S": str(stale)}
    output = f"s3://{bucket}/p.ome.zarr"
    sets = ["--set", f"output={output}", "--set", "shape=[4,32,32]", "--set", "chunks=[1,32,32]",
            "--set", "unit_mb=0.001"]  # a unit per chunk: 4 units, 4 chunk objects
    release = tmp_path / "release"
    first = subprocess.Popen([sys.executable, "-c", SLOW_RUN, str(release), "task", "generate", "--executor", "sync",
                              *sets], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait(lambda: f"{bucket}/{LOCK}" in s3env.keys(f"{bucket}/.p.ome.zarr.zarrmill")
                     or first.poll() is not None, 60), "the first run never took its lock"
        assert first.poll() is None, first.communicate()
        time.sleep(stale + 0.5)  # the lock was created at least this long ago: stale unless renewed
        second = subprocess.run([sys.executable, "-m", "zarrmill", "task", "generate", "--executor", "sync",
                                 "--overwrite", *sets], env=env, capture_output=True, text=True, timeout=60)
        assert first.poll() is None, "the first run ended before the second was judged"
        assert second.returncode != 0 and "another zarrmill run is writing this output" in second.stderr, \
            second.stderr
        assert "taking over" not in second.stdout + second.stderr
    finally:
        release.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "warning" not in err and "error" not in err, err
    chunks = [k for k in s3env.keys(f"{bucket}/p.ome.zarr") if "/0/c/" in k]
    assert len(chunks) == 4, chunks
    assert s3env.keys(f"{bucket}/.p.ome.zarr.zarrmill/lock") == []  # released at the end


def _port_outside_the_ephemeral_range() -> int:
    """A free port below Linux's ephemeral range (32768-60999): while the proxy is down, no outgoing
    connection on this busy machine can take its port, so it comes back on the same one."""
    import random
    import socket

    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


@pytest.fixture
def via_proxy(s3env, monkeypatch):
    """The S3 server behind a proxy that can be taken away and brought back (a server restarting);
    one attempt per request, so a refused connection fails at once instead of in a client's retries."""
    from s3_faults import FaultyProxy

    from zarrmill.io.storage.location import reset_clients

    proxy = FaultyProxy(s3env.port, _port_outside_the_ephemeral_range()).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    reset_clients()
    try:
        yield proxy
    finally:
        proxy.stop()
        reset_clients()


def _warnings(caplog) -> list[str]:
    """The lock's record of each failed heartbeat (one warning line reaches the terminal per lease;
    the log keeps a record of every beat that failed)."""
    return [r.getMessage() for r in caplog.records if r.name == "zarrmill.locks" and r.levelno >= logging.INFO
            and "heartbeat" in r.getMessage()]


def test_a_server_gone_costs_beats_then_the_lease(bucket, s3env, via_proxy, caplog, capsys, monkeypatch):
    from zarrmill.io.storage.location import reset_clients

    caplog.set_level(logging.INFO, logger="zarrmill.locks")
    url = f"s3://{bucket}/{LOCK}"
    lease = open_lock(url, heartbeat=0.2, stale_after=1.5)
    lease.acquire()
    try:
        via_proxy.stop()  # a brief outage: beats fail, the lease holds
        assert _wait(lambda: len(_warnings(caplog)) >= 2, 10), _warnings(caplog)
        via_proxy.start()
        time.sleep(2.0)  # longer than stale_after: only beats that took since keep it
        assert not lease.lost()
        # the proxy's threads may print a cut connection's traceback: only zarrmill's lines count
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("zarrmill:")]
        assert len(lines) == 1 and lines[0].startswith(f"zarrmill: warning: {url}: the run lock's heartbeat failed"), \
            lines
        assert all(url in m for m in _warnings(caplog))

        via_proxy.stop()  # gone for good
        stopped, failed = time.monotonic(), len(_warnings(caplog))
        assert _wait(lambda: len(_warnings(caplog)) > failed, 10)
        assert not lease.lost()  # a failed beat is not yet a lost lease
        assert _wait(lease.lost, 10)
        assert time.monotonic() - stopped > 0.5  # lost once stale_after passed without a beat, not at once
        with pytest.raises(LeaseLost, match="could not be renewed for 1.5 s"):
            lease.check()
        assert capsys.readouterr().err.count("zarrmill: warning:") == 0  # the stderr line is printed once
    finally:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3env.endpoint)  # the server itself, not the proxy
        reset_clients()
        lease.release()  # still this run's lock in the bucket: removed
    assert s3env.keys(f"{bucket}/.p.ome.zarr.zarrmill") == []


def test_a_lock_rewritten_or_replaced_behind_its_back(bucket, s3env, caplog, capsys):
    caplog.set_level(logging.INFO, logger="zarrmill.locks")
    key = f"{bucket}/{LOCK}"
    lease = open_lock(f"s3://{key}", heartbeat=0.2, stale_after=30)
    lease.acquire()
    fs = s3env.fs()
    try:
        # rewritten with this run's own token (another ETag): that renewal does not take, the next does
        def rewrite() -> bool:
            doc = json.loads(fs.cat_file(key))
            fs.pipe_file(key, json.dumps(doc, indent=1).encode())
            return _wait(lambda: any("changed since" in m for m in _warnings(caplog)), 1)

        assert _wait(rewrite, 10)
        after = fs.info(key, refresh=True)["ETag"]
        assert _wait(lambda: fs.info(key, refresh=True)["ETag"] != after, 5), "beats did not resume"
        assert not lease.lost()

        # another run's lock in its place: lost at the next beat, never renewed over
        theirs = {"host": "elsewhere", "pid": 1, "token": "theirs", "beat": time.time()}
        fs.pipe_file(key, json.dumps(theirs).encode())
        assert _wait(lease.lost, 5)
        with pytest.raises(LeaseLost, match=r"took this run's lock over \(another run \(elsewhere:1\) holds it now\)"):
            lease.check()
        assert any("elsewhere:1" in m for m in _warnings(caplog))
        err = capsys.readouterr().err
        assert err.count("zarrmill: warning:") == 1, err
    finally:
        lease.release()
    assert json.loads(fs.cat_file(key))["token"] == "theirs"  # never removed: not this run's
    fs.rm_file(key)


def test_a_lease_in_a_folder_still_renews_by_its_modification_time(tmp_path):
    """The disk lease is untouched: renewed by a touch, never rewritten, and judged alike."""
    folder = tmp_path / ".out.zarr.zarrmill"
    folder.mkdir()
    first = open_lock(folder / "lock", heartbeat=0.1, stale_after=0.6)
    first.acquire()
    try:
        content = (folder / "lock").read_bytes()
        mtime = os.stat(folder / "lock").st_mtime_ns
        time.sleep(1.0)
        assert os.stat(folder / "lock").st_mtime_ns > mtime and (folder / "lock").read_bytes() == content
        with pytest.raises(Locked):
            open_lock(folder / "lock", heartbeat=0.1, stale_after=0.6).acquire()
        assert not first.lost()
    finally:
        first.release()
    assert not Path(folder / "lock").exists()
