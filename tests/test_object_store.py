"""Stores in an S3 bucket, against a real S3 server process on 127.0.0.1 (moto's standalone server,
with authentication on; tests/s3_server.py), never a mock of a client:

- ingest (layout fov and well) and pyramid write to s3:// the same objects as the same run on disk;
- check, zarr-python, ome-zarr-py's Reader and ngio open what it wrote, pixels equal to disk;
- a rerun skips, a killed run reruns to the same objects;
- a foreign prefix, a bucket that does not exist, wrong credentials, an unreachable endpoint and a
  URL zarrmill cannot serve are each one line, exit 2, nothing written and nothing deleted;
- no credential lands in any object, bookkeeping, log or dry-run output."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import tree_digest

from zarrmill.io.storage.guard import is_bookkeeping_name

pytestmark = pytest.mark.timeout(600)


def generate(cli, raw: Path, fmt: str = "cellvoyager") -> Path:
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", f"format={fmt}",
                       "--set", "wells=[B03,C04]", "--set", "grid=[2,2]", "--set", "shape=[48,64]",
                       "--set", "z_planes=2", "--set", "channels=2")
    assert code == 0, err
    return raw


def task(cli, name: str, *sets: str, executor: str = "sync"):
    args = ["task", name, "--executor", executor]
    for s in sets:
        args += ["--set", s]
    return cli(*args)


def digest_objects(objects: dict[str, bytes]) -> dict[str, str]:
    """As conftest.tree_digest: bookkeeping and provenance left out."""
    from conftest import _without_provenance

    out = {}
    for rel, data in sorted(objects.items()):
        if any(is_bookkeeping_name(p) for p in rel.split("/")):
            continue
        if rel.rsplit("/", 1)[-1] in ("zarr.json", ".zattrs"):
            data = _without_provenance(data)
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


@pytest.mark.parametrize("layout,executor", [("fov", "sync"), ("well", "threads"), ("well", "local")])
def test_ingest_to_s3_writes_the_objects_it_writes_to_disk(cli, tmp_path, bucket, s3env, layout, executor):
    raw = generate(cli, tmp_path / "raw")
    sets = [f"input={raw}", f"layout={layout}", "min_size=16"]
    code, _, err = task(cli, "ingest", *sets, f"output={tmp_path / 'disk.zarr'}", executor=executor)
    assert code == 0, err
    url = f"s3://{bucket}/plates/p.ome.zarr"
    code, _, err = task(cli, "ingest", *sets, f"output={url}", executor=executor)
    assert code == 0, err
    remote = s3env.objects(f"{bucket}/plates/p.ome.zarr")
    assert digest_objects(remote) == tree_digest(tmp_path / "disk.zarr")
    code, out, err = cli("check", url)
    assert code == 0, out + err
    # a rerun finds its ledger in the bucket and skips
    code, _, err = task(cli, "ingest", *sets, f"output={url}", executor=executor)
    assert code == 0 and "already done" in err, err
    # bookkeeping beside the store, not in it
    assert not any(".zarrmill" in k for k in remote)
    assert any(k.endswith("owner.json") for k in s3env.objects(f"{bucket}/plates/.p.ome.zarr.zarrmill"))
    # nothing above it: zarr-python's parent groups (a zarr.json at the bucket's root) are not written
    outside = [k for k in s3env.objects(bucket) if not k.startswith(("plates/p.ome.zarr/", "plates/.p.ome.zarr.zarrmill/"))]
    assert not outside, outside


def test_pyramid_in_place_on_s3_matches_disk_and_readers_open_it(cli, tmp_path, bucket, s3env):
    raw = generate(cli, tmp_path / "raw")
    url = f"s3://{bucket}/p.ome.zarr"
    for out in (str(tmp_path / "disk.zarr"), url):
        code, _, err = task(cli, "ingest", f"input={raw}", f"output={out}")
        assert code == 0, err
        code, _, err = task(cli, "pyramid", f"input={out}", "min_size=16")
        assert code == 0, err
    assert digest_objects(s3env.objects(f"{bucket}/p.ome.zarr")) == tree_digest(tmp_path / "disk.zarr")
    code, out, err = cli("check", url)
    assert code == 0 and "ok (plate" in out, out + err
    disk = np.asarray(zarr.open_array(str(tmp_path / "disk.zarr" / "B" / "03" / "0" / "1"), mode="r")[:])
    # zarr-python straight from the bucket
    remote = np.asarray(zarr.open_array(f"{url}/B/03/0/1", mode="r")[:])
    np.testing.assert_array_equal(remote, disk)
    # ome-zarr-py's Reader, from the server over its own URL handling
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    nodes = list(Reader(parse_url(f"{url}/B/03/0"))())
    np.testing.assert_array_equal(np.asarray(nodes[0].data[1]), disk)
    # ngio (Fractal's reader)
    import ngio

    plate = ngio.open_ome_zarr_plate(url)
    image = plate.get_image("B", "03", "0")
    np.testing.assert_array_equal(np.asarray(image.get_image(path="1").get_array()), disk)


def test_a_foreign_prefix_is_refused_and_left_as_it_was(cli, tmp_path, bucket, s3env):
    raw = generate(cli, tmp_path / "raw")
    fs = s3env.fs()
    fs.pipe_file(f"{bucket}/theirs/data.bin", b"someone else's")
    fs.pipe_file(f"{bucket}/theirs/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    before = s3env.objects(f"{bucket}/theirs")
    for extra in ([], ["--overwrite"]):
        code, _, err = cli("task", "ingest", "--executor", "sync", *extra, "--set", f"input={raw}",
                           "--set", f"output=s3://{bucket}/theirs")
        assert code == 2 and "did not create" in err and len(err.strip().splitlines()) == 1, err
        assert s3env.objects(f"{bucket}/theirs") == before
    assert not s3env.objects(f"{bucket}/.theirs.zarrmill")


def test_overwrite_replaces_only_its_own_store_and_leaves_neighbours(cli, tmp_path, bucket, s3env):
    raw = generate(cli, tmp_path / "raw")
    fs = s3env.fs()
    fs.pipe_file(f"{bucket}/p.ome.zarr-notes/readme.txt", b"a neighbour sharing the name's start")
    code, _, err = task(cli, "ingest", f"input={raw}", f"output=s3://{bucket}/p.ome.zarr")
    assert code == 0, err
    first = digest_objects(s3env.objects(f"{bucket}/p.ome.zarr"))
    code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={raw}",
                       "--set", f"output=s3://{bucket}/p.ome.zarr", "--set", "channel_names=[a,b]")
    assert code == 0, err
    assert digest_objects(s3env.objects(f"{bucket}/p.ome.zarr")) != first
    assert s3env.objects(f"{bucket}/p.ome.zarr-notes") == {"readme.txt": b"a neighbour sharing the name's start"}


@pytest.mark.parametrize("case", ["no bucket", "wrong secret", "unknown key", "no credentials", "unreachable",
                                  "gs scheme", "one slash", "https output", "whole bucket"])
def test_bad_object_store_settings_are_one_line_and_write_nothing(cli, tmp_path, tmp_path_factory, bucket, s3env,
                                                                  monkeypatch, case):
    """One line, exit 2, nothing written; and no credential (the right one or the wrong one) in the
    line, the run's log or a crash file."""
    state = tmp_path_factory.mktemp("state")  # error logs and crash files: a fake root, outside tmp_path
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    raw = generate(cli, tmp_path / "raw")
    url = f"s3://{bucket}/p.ome.zarr"
    expect = {"no bucket": "does not exist", "wrong secret": "refused the credentials",
              "unknown key": "refused the credentials", "no credentials": "no S3 credentials found",
              "unreachable": "cannot reach the S3 endpoint",
              "gs scheme": "does not serve", "one slash": "one '/' after the scheme",
              "https output": "only reads", "whole bucket": "names a whole bucket"}[case]
    if case == "no bucket":
        url = "s3://no-such-bucket-here/p.ome.zarr"
    elif case == "wrong secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    elif case == "unknown key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAKEYATALL0000")
    elif case == "no credentials":  # none anywhere botocore looks: environment, files, instance metadata
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(state / "no-credentials"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(state / "no-config"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    elif case == "unreachable":
        from s3_server import free_port

        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    elif case == "gs scheme":
        url = "gs://lab/p.ome.zarr"
    elif case == "one slash":
        url = f"s3:/{bucket}/p.ome.zarr"
    elif case == "https output":
        url = "https://example.org/p.ome.zarr"
    elif case == "whole bucket":
        url = f"s3://{bucket}"
    before = set(os.listdir(tmp_path))
    t0 = time.monotonic()
    code, _, err = task(cli, "ingest", f"input={raw}", f"output={url}")
    errors = [line for line in err.splitlines() if line.startswith("zarrmill: error")]
    assert code == 2 and len(errors) == 1 and expect in errors[0], err
    assert time.monotonic() - t0 < 60, "refused before any work"
    assert set(os.listdir(tmp_path)) == before, "nothing written locally (no folder named s3:)"
    for secret in (s3env.secret, "not-the-secret"):
        assert secret not in err
        for path in state.rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3env.secret)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3env.key)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3env.endpoint)
    assert s3env.objects(bucket) == {}


def test_a_task_without_object_stores_says_so(cli, tmp_path, bucket):
    code, _, err = task(cli, "generate-plate", f"output=s3://{bucket}/c")
    assert code == 2 and "reads and writes local paths only" in err, err


def test_a_killed_run_reruns_to_the_same_objects(cli, tmp_path, bucket, s3env):
    raw = generate(cli, tmp_path / "raw")
    code, _, err = task(cli, "ingest", f"input={raw}", f"output=s3://{bucket}/whole.ome.zarr", "layout=well",
                        "min_size=16")
    assert code == 0, err
    url = f"s3://{bucket}/killed.ome.zarr"
    cmd = [sys.executable, "-m", "zarrmill", "task", "ingest", "--executor", "sync", "--set", f"input={raw}",
           "--set", f"output={url}", "--set", "layout=well", "--set", "min_size=16"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # killed once the first unit is recorded
        if any("/done/" in k for k in s3env.keys(f"{bucket}/.killed.ome.zarr.zarrmill")):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    code, _, err = task(cli, "ingest", f"input={raw}", f"output={url}", "layout=well", "min_size=16")
    assert code == 0, err
    assert digest_objects(s3env.objects(f"{bucket}/killed.ome.zarr")) == \
        digest_objects(s3env.objects(f"{bucket}/whole.ome.zarr"))
    code, out, err = cli("check", url)
    assert code == 0, out + err


def test_no_credential_lands_in_anything_zarrmill_writes(cli, tmp_path, bucket, s3env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # error logs and crash files: a fake root
    raw = generate(cli, tmp_path / "raw")
    url = f"s3://{bucket}/p.ome.zarr"
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "s3", "storage": {"region": "us-east-1"}, "steps": {
        "ingest": {"task": "ingest", "params": {"input": str(raw), "output": url, "layout": "well", "min_size": 16}}}}))
    code, dry, err = cli("run", str(wf), "--dry-run")
    assert code == 0, err
    code, out, err = cli("run", str(wf))
    assert code == 0, err
    secret = s3env.secret.encode()
    for key, data in s3env.objects(bucket).items():
        assert secret not in data and s3env.key.encode() not in data, key
    for text in (dry, out, err):
        assert s3env.secret not in text
    for path in tmp_path.rglob("*"):  # the state folder included
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert secret not in path.read_bytes(), path


def test_a_credential_in_the_storage_block_is_refused(cli, tmp_path, bucket):
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "s3", "storage": {"secret_access_key": "x"}, "steps": {
        "g": {"task": "generate-plate", "params": {"output": str(tmp_path / "raw")}}}}))
    code, _, err = cli("run", str(wf))
    assert code == 2 and "storage" in err, err


def test_throttling_is_retried_and_the_run_finishes_with_the_same_objects(cli, tmp_path, bucket, s3env, monkeypatch):
    from s3_faults import FaultyProxy
    from s3_server import free_port

    raw = generate(cli, tmp_path / "raw")
    sets = [f"input={raw}", "layout=well", "min_size=16"]
    assert task(cli, "ingest", *sets, f"output={tmp_path / 'disk.zarr'}")[0] == 0
    proxy = FaultyProxy(s3env.port, free_port(), throttle_every=4).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        code, _, err = task(cli, "ingest", *sets, f"output=s3://{bucket}/p.ome.zarr")
    finally:
        proxy.stop()
    assert code == 0, err
    assert proxy.throttled > 5, "the proxy throttled writes"
    assert digest_objects(s3env.objects(f"{bucket}/p.ome.zarr")) == tree_digest(tmp_path / "disk.zarr")


def test_a_server_gone_mid_run_is_one_failure_line_and_the_rerun_finishes(cli, tmp_path, bucket, s3env, monkeypatch):
    import threading

    from s3_faults import FaultyProxy
    from s3_server import free_port

    raw = tmp_path / "raw"
    assert task(cli, "generate-plate", f"output={raw}", "wells=[B03,C04,D05]", "grid=[3,3]", "shape=[64,80]",
                "z_planes=3")[0] == 0
    sets = [f"input={raw}", "min_size=16"]
    assert task(cli, "ingest", *sets, f"output={tmp_path / 'disk.zarr'}")[0] == 0
    proxy = FaultyProxy(s3env.port, free_port()).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")

    def take_it_away() -> None:  # once the first plane is in the bucket
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("/c/" in k for k in s3env.keys(f"{bucket}/p.ome.zarr")):
            time.sleep(0.01)
        proxy.stop()

    watcher = threading.Thread(target=take_it_away)
    watcher.start()
    # its own process, as a real run: the lock it cannot remove with the server gone is taken over
    # by the rerun once its holder is gone
    done = subprocess.run([sys.executable, "-m", "zarrmill", "task", "ingest", "--executor", "sync",
                           *[a for s in sets for a in ("--set", s)], "--set", f"output=s3://{bucket}/p.ome.zarr"],
                          capture_output=True, text=True, timeout=300, env=os.environ.copy())
    watcher.join()
    errors = [line for line in done.stderr.splitlines() if line.startswith("zarrmill: error")]
    assert done.returncode in (1, 2) and len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    proxy.start()
    try:
        code, _, err = task(cli, "ingest", *sets, f"output=s3://{bucket}/p.ome.zarr")
    finally:
        proxy.stop()
    assert code == 0, err
    assert digest_objects(s3env.objects(f"{bucket}/p.ome.zarr")) == tree_digest(tmp_path / "disk.zarr")


def test_generate_rechunk_labels_and_patches_on_s3_write_what_they_write_to_disk(cli, tmp_path, bucket, s3env):
    """The other tasks that name stores: a generated image in the bucket, rechunked within it and to
    disk, labelled in place (mask file local) and cut into patches (points file local)."""
    import tifffile

    mask = np.zeros((16, 64, 64), dtype=np.uint16)
    mask[4:12, 10:30, 20:50] = 3
    tifffile.imwrite(tmp_path / "mask.tif", mask)
    np.save(tmp_path / "pts.npy", np.array([[8, 32, 32], [4, 10, 50]], dtype=float))
    roots = {"disk": str(tmp_path / "d"), "s3": f"s3://{bucket}/d"}
    for where, root in roots.items():
        for args in (("generate", f"output={root}/img.zarr", "shape=[2,16,64,64]", "axes=czyx", "chunks=[1,8,32,32]"),
                     ("rechunk", f"input={root}/img.zarr", f"output={root}/re.zarr", "chunks=[1,4,16,16]"),
                     ("labels", f"input={tmp_path / 'mask.tif'}", f"image={root}/img.zarr", "axes=zyx", "min_size=16"),
                     ("patch-extract", f"input={root}/img.zarr", f"output={root}/patches.zarr",
                      f"points={tmp_path / 'pts.npy'}", "cuboid=[4,8,8]")):
            code, _, err = task(cli, *args)
            assert code == 0, f"{where} {args[0]}: {err}"
    for name in ("img.zarr", "re.zarr", "patches.zarr"):
        remote, local = digest_objects(s3env.objects(f"{bucket}/d/{name}")), tree_digest(tmp_path / "d" / name)
        if name == "patches.zarr":  # they name their source (a URL here, a path there): all else is equal
            from zarrmill.io.training.patch_table import points_table

            assert remote.pop("zarr.json") and local.pop("zarr.json")
            rows = [points_table(f"s3://{bucket}/d/{name}"), points_table(tmp_path / "d" / name)]
            assert [[{k: v for k, v in r.items() if k != "source"} for r in t] for t in rows][0] == \
                   [[{k: v for k, v in r.items() if k != "source"} for r in t] for t in rows][1]
        assert remote == local, name
        code, out, err = cli("check", f"s3://{bucket}/d/{name}")
        assert code == 0, out + err
    outside = [k for k in s3env.objects(bucket) if not k.startswith(
        tuple(f"d/{n}/" for n in ("img.zarr", "re.zarr", "patches.zarr", ".img.zarr.zarrmill", ".re.zarr.zarrmill",
                                  ".patches.zarr.zarrmill")))]
    assert not outside, f"written outside the outputs: {outside}"
    # from the bucket to disk
    code, _, err = task(cli, "rechunk", f"input=s3://{bucket}/d/img.zarr", f"output={tmp_path / 'back.zarr'}",
                        "chunks=[1,4,16,16]")
    assert code == 0, err
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "back.zarr" / "0"))[:],
                                  zarr.open_array(str(tmp_path / "d" / "img.zarr" / "0"))[:])


def test_a_web_store_is_read_over_http_and_never_written(cli, tmp_path):
    """https:// (here http:// on 127.0.0.1, which zarrmill reads only from this machine): inputs of
    rechunk and patch-extract are read over HTTP with the same pixels; as an output, one line."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    web = tmp_path / "web"
    code, _, err = task(cli, "generate", f"output={web / 'img.zarr'}", "shape=[2,16,64,64]", "axes=czyx",
                        "chunks=[1,8,32,32]")
    assert code == 0, err
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(web))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/img.zarr"
    try:
        code, _, err = task(cli, "rechunk", f"input={url}", f"output={tmp_path / 'copy.zarr'}", "chunks=[1,4,16,16]")
        assert code == 0 and "not fingerprinted" in err, err
        np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "copy.zarr" / "0"))[:],
                                      zarr.open_array(str(web / "img.zarr" / "0"))[:])
        code, _, err = task(cli, "compress", f"input={url}", f"output={tmp_path / 'b2'}", "patch=[8,32,32]")
        assert code == 0, err
        import blosc2

        np.testing.assert_array_equal(blosc2.open(str(tmp_path / "b2" / "img.b2nd"))[:],
                                      zarr.open_array(str(web / "img.zarr" / "0"))[:])
        code, _, err = task(cli, "rechunk", f"input={web / 'img.zarr'}", f"output={url}2", "chunks=[1,4,16,16]")
        assert code == 2 and "only reads" in err, err
        code, _, err = cli("check", url)
        assert code == 2 and "lists nothing" in err, err
    finally:
        server.shutdown()
    code, _, err = task(cli, "rechunk", "input=http://example.org/img.zarr", f"output={tmp_path / 'x.zarr'}",
                        "chunks=[1,4,16,16]")
    assert code == 2 and "use https://" in err, err


def test_compress_reads_and_writes_s3_and_tune_samples_from_it(cli, tmp_path, bucket, s3env):
    """compress: an OME-Zarr image in the bucket becomes Blosc2 .b2nd objects (each one whole PUT of
    the file built locally) and a zarr set in the bucket, each equal to the same run on disk;
    tune samples from the bucket and writes its report to a local folder only."""
    import blosc2

    roots = {"disk": str(tmp_path / "d"), "s3": f"s3://{bucket}/d"}
    for where, root in roots.items():
        code, _, err = task(cli, "generate", f"output={root}/img.zarr", "shape=[2,16,64,64]", "axes=czyx",
                            "chunks=[1,8,32,32]")
        assert code == 0, f"{where}: {err}"
        for fmt in ("b2nd", "zarr"):
            code, _, err = task(cli, "compress", f"input={root}/img.zarr", f"output={root}/{fmt}", f"format={fmt}",
                                "patch=[8,32,32]", "codec=zstd", "clevel=3")
            assert code == 0, f"{where} {fmt}: {err}"
    image = zarr.open_array(str(tmp_path / "d" / "img.zarr" / "0"))[:]
    objects = s3env.objects(f"{bucket}/d/b2nd")
    on_disk = sorted(str(f.relative_to(tmp_path / "d" / "b2nd")) for f in (tmp_path / "d" / "b2nd").rglob("*")
                     if f.is_file())
    assert sorted(objects) == on_disk and "img.b2nd" in on_disk, (sorted(objects), on_disk)
    (tmp_path / "from-s3.b2nd").write_bytes(objects["img.b2nd"])
    np.testing.assert_array_equal(blosc2.open(str(tmp_path / "from-s3.b2nd"))[:], image)
    summary = json.loads(objects["zarrmill/compress.json"])
    assert summary["state"] == "done" and summary["cases"][0]["bytes"] == len(objects["img.b2nd"])
    remote, local = digest_objects(s3env.objects(f"{bucket}/d/zarr")), tree_digest(tmp_path / "d" / "zarr")
    for key in ("zarr.json",):  # the set's summary names its source (a URL here, a path there)
        assert remote.pop(key) and local.pop(key)
    assert remote == local
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "d" / "zarr" / "img" / "0"))[:], image)
    for fmt in ("zarr", "b2nd"):
        code, out, err = cli("check", f"s3://{bucket}/d/{fmt}")
        assert code == 0, out + err
    s3env.fs().pipe_file(f"{bucket}/d/b2nd/img.b2nd", objects["img.b2nd"][:-64])  # a torn copy: check says so
    code, out, err = cli("check", f"s3://{bucket}/d/b2nd")
    assert code != 0 and f"s3://{bucket}/d/b2nd/img.b2nd" in out + err, out + err
    code, _, err = task(cli, "tune", f"input=s3://{bucket}/d/img.zarr", f"output={tmp_path / 'tune'}",
                        "patch=[8,32,32]", "seconds=2", "crop=1", "layouts=[zarrmill]")
    assert code == 0 and (tmp_path / "tune" / "recommended.yaml").is_file(), err
    before = s3env.objects(bucket)
    code, _, err = task(cli, "tune", f"input=s3://{bucket}/d/img.zarr", f"output=s3://{bucket}/tune",
                        "patch=[8,32,32]")
    assert code == 2 and "its output is a local folder" in err, err
    assert s3env.objects(bucket) == before
    code, _, err = task(cli, "compress", f"input=s3://{bucket}/d/b2nd/img.b2nd", f"output={tmp_path / 'x'}",
                        "patch=[8,32,32]")
    assert code == 2 and "a URL input must be zarr" in err, err
