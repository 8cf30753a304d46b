"""A bucket a whole lab writes to (#36), against a real S3 server on 127.0.0.1 (moto's):

- a failed first run leaves the bucket exactly as it was (no marker, no claim, no step record), and
  a colleague's objects put afterwards under that prefix survive every rerun, --overwrite included;
- glob and special characters in a prefix are one line; look-alike prefixes beside the output
  (``run/p.ome.zarr.bak``, ``runs/...``, ``exp1/...``) survive every run byte for byte;
- deletes are literal keys in DeleteObjects batches; emptiness and access are one LIST of the prefix;
- create-only and If-Match writes are recognised as AWS, MinIO and Ceph RGW refuse them (a proxy
  answers as each does); a lease taken over in a bucket is noticed by its old holder;
- a credential in a URL is one line, exit 2, and lands nowhere."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_object_store import generate, task

from zarrmill.io.storage.backend import ObjectBackend
from zarrmill.io.storage.location import as_location

pytestmark = pytest.mark.timeout(600)


def everything(s3env, bucket: str) -> dict[str, bytes]:
    return s3env.objects(bucket)


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1


def test_a_failed_first_run_leaves_nothing_and_a_colleagues_object_survives_overwrite(cli, tmp_path, bucket, s3env):
    unknown = tmp_path / "not-an-instrument"
    unknown.mkdir()
    (unknown / "notes.txt").write_text("no known format")
    url = f"s3://{bucket}/b/plate.ome.zarr"
    code, _, err = task(cli, "ingest", f"input={unknown}", f"output={url}")
    assert code == 2 and one_line(err), err
    assert everything(s3env, bucket) == {}, "a failed plan left objects in the bucket"
    fs = s3env.fs()
    fs.pipe_file(f"{bucket}/b/plate.ome.zarr/colleague.txt", b"a colleague's result")
    before = everything(s3env, bucket)
    raw = generate(cli, tmp_path / "raw")
    for extra in ([], ["--overwrite"]):
        code, _, err = cli("task", "ingest", "--executor", "sync", *extra, "--set", f"input={raw}", "--set",
                           f"output={url}")
        assert code == 2 and "did not create" in err and one_line(err), err
        assert everything(s3env, bucket) == before


def test_a_marker_a_crashed_run_left_proves_nothing_without_the_claim(cli, tmp_path, bucket, s3env):
    """Even when a run died before it could clean up (its marker and step record stay), objects
    put under the prefix later are not zarrmill's: the prefix does not carry the marker's id."""
    fs = s3env.fs()
    fs.pipe_file(f"{bucket}/.p.ome.zarr.zarrmill/owner.json",
                 json.dumps({"tool": "zarrmill", "id": "0" * 32, "step": "ingest"}).encode())
    fs.pipe_file(f"{bucket}/.p.ome.zarr.zarrmill/steps/ingest/step.json", b"{}")
    fs.pipe_file(f"{bucket}/p.ome.zarr/theirs.bin", b"theirs")
    raw = generate(cli, tmp_path / "raw")
    code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={raw}", "--set",
                       f"output=s3://{bucket}/p.ome.zarr")
    assert code == 2 and "did not create" in err, err
    assert fs.cat_file(f"{bucket}/p.ome.zarr/theirs.bin") == b"theirs"


@pytest.mark.parametrize("prefix", ["exp[1]/plate.ome.zarr", "run*/plate.ome.zarr", "a?/p.zarr", "x/{y}/p.zarr",
                                    "pct%41/p.zarr"])
def test_pattern_characters_in_a_prefix_are_one_line_and_touch_nothing(cli, tmp_path, bucket, s3env, prefix):
    fs = s3env.fs()
    for key in ("exp1/plate.ome.zarr/zarr.json", "run/plate.ome.zarr/data", "runs/plate.ome.zarr/data",
                "a1/p.zarr/data", "x/y/p.zarr/data"):
        fs.pipe_file(f"{bucket}/{key}", b"a colleague's " + key.encode())
    before = everything(s3env, bucket)
    raw = generate(cli, tmp_path / "raw")
    for extra in ([], ["--overwrite"]):
        code, _, err = cli("task", "ingest", "--executor", "sync", *extra, "--set", f"input={raw}", "--set",
                           f"output=s3://{bucket}/{prefix}")
        assert code == 2 and one_line(err) and "special characters" in err, err
        assert "unexpected" not in err
    assert everything(s3env, bucket) == before


def test_look_alike_prefixes_survive_runs_overwrites_and_failed_plans(cli, tmp_path, bucket, s3env):
    fs = s3env.fs()
    neighbours = ("run/p.ome.zarr.bak/zarr.json", "run/p.ome.zarr-old/B/03/zarr.json", "runs/p.ome.zarr/zarr.json",
                  "run/p.ome.zarr2/x", "run/p.ome.zar/x", "run/.p.ome.zarr.zarrmill2/x", "run/p.ome.zarr.zarrmill/x")
    for key in neighbours:
        fs.pipe_file(f"{bucket}/{key}", b"neighbour " + key.encode())
    raw = generate(cli, tmp_path / "raw")
    url = f"s3://{bucket}/run/p.ome.zarr"
    assert task(cli, "ingest", f"input={raw}", f"output={url}")[0] == 0
    code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={raw}",
                       "--set", f"output={url}", "--set", "channel_names=[a,b]")
    assert code == 0, err
    code, _, err = cli("task", "ingest", "--executor", "sync", "--overwrite", "--set", f"input={tmp_path / 'nothing'}",
                       "--set", f"output={url}")
    assert code == 2, err
    for key in neighbours:
        assert fs.cat_file(f"{bucket}/{key}") == b"neighbour " + key.encode(), key
    assert task(cli, "ingest", f"input={raw}", f"output={url}", "channel_names=[a,b]")[2].count("already done") == 1


def test_deletes_are_literal_batched_and_never_expand_a_pattern(bucket, s3env):
    fs = s3env.fs()
    names = [f"b/k{i:04d}" for i in range(1100)] + ["b/k[0]", "b/k*"]
    fs.pipe({f"{bucket}/{n}": b"x" for n in names})
    fs.pipe_file(f"{bucket}/b/k0", b"look-alike of k[0]")
    backend = ObjectBackend(as_location(f"s3://{bucket}/b"))
    backend.delete(["k[0]", "k*"] + [n[2:] for n in names[:1100]])  # 1102 keys: two DeleteObjects requests
    assert sorted(s3env.objects(f"{bucket}/b")) == ["k0"]


@pytest.mark.parametrize("style", ["aws", "minio", "ceph", "conflict"])
def test_conditional_writes_are_recognised_as_each_server_refuses_them(bucket, s3env, monkeypatch, style):
    from s3_faults import FaultyProxy
    from s3_server import free_port

    from zarrmill.io.storage.location import reset_clients

    proxy = FaultyProxy(s3env.port, free_port(), conditions=style).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        reset_clients()
        backend = ObjectBackend(as_location(f"s3://{bucket}/.x.zarrmill"))
        assert backend.create("lock", b"first")
        assert not backend.create("lock", b"second")  # exists: refused, and known as refused
        version = backend.stat("lock")
        assert backend.replace("lock", b"third", if_version=version.token)
        assert not backend.replace("lock", b"fourth", if_version=version.token)  # changed since
        assert backend.read("lock") == b"third"
        assert proxy.conditions_refused == 2
    finally:
        proxy.stop()
        reset_clients()


def test_a_whole_run_through_a_minio_shaped_server_keeps_runs_apart(cli, tmp_path, bucket, s3env, monkeypatch):
    from s3_faults import FaultyProxy
    from s3_server import free_port

    raw = generate(cli, tmp_path / "raw")
    proxy = FaultyProxy(s3env.port, free_port(), conditions="minio").start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        code, _, err = task(cli, "ingest", f"input={raw}", f"output=s3://{bucket}/p.ome.zarr")
    finally:
        proxy.stop()
    assert code == 0, err
    assert "ignores conditional writes" not in err and proxy.conditions_refused >= 1


def test_a_lease_taken_over_in_a_bucket_is_noticed_by_its_old_holder(bucket, s3env):
    from zarrmill.runtime.core.locks import LeaseLost, open_lock

    url = f"s3://{bucket}/.p.ome.zarr.zarrmill/lock"
    first = open_lock(url, heartbeat=0.2, stale_after=0.5)
    first.acquire()
    first._stop.set()  # its heartbeats stop (a hung node): the lease goes stale
    time.sleep(1.0)
    second = open_lock(url, heartbeat=0.2, stale_after=0.5)
    second.acquire()  # taken over
    first.beat()
    assert first.lost()
    with pytest.raises(LeaseLost, match="took this run's lock over"):
        first.check()
    first.release()  # never removes the lock it no longer holds
    assert json.loads(s3env.fs().cat_file(url[len("s3://"):]))["token"] == second.token
    second.release()


SECRET_URLS = ["https://alice:s3cr3tpw@127.0.0.1:9/x.zarr", "https://127.0.0.1:9/x.zarr?X-Amz-Signature=s3cr3tpw",
               "https://127.0.0.1:9/x.zarr?sig=s3cr3tpw&sv=2024", "https://127.0.0.1:9/x.zarr?token=s3cr3tpw"]


@pytest.mark.parametrize("url", SECRET_URLS)
def test_a_credential_in_a_url_is_one_line_and_lands_nowhere(cli, tmp_path, monkeypatch, url):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("ZARRMILL_RUNS_DIR", str(tmp_path / "runs"))
    outputs = []
    code, out, err = task(cli, "rechunk", f"input={url}", f"output={tmp_path / 'o.zarr'}")
    outputs.append(out + err)
    assert code == 2 and one_line(err) and "carries" in err, err
    code, out, err = cli("check", url)
    outputs.append(out + err)
    assert code == 2 and one_line(err), err
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "w", "steps": {"r": {"task": "rechunk", "params": {
        "input": url, "output": str(tmp_path / "r.zarr")}}}}))
    for extra in ([], ["--dry-run"]):
        code, out, err = cli("run", str(wf), *extra)
        outputs.append(out + err)
        assert code == 2, out + err
    for text in outputs:
        assert "s3cr3tpw" not in text and "alice" not in text, text
    for path in Path(tmp_path).rglob("*"):
        if path.is_file() and path != wf:
            assert b"s3cr3tpw" not in path.read_bytes(), path


def test_redact_shortens_every_secret_url_in_a_text():
    from zarrmill.io.storage.secrets import redact, secret_in_url

    text = "zarrmill task rechunk --set input=https://bob:pw@h/x.zarr?a=1 --set output=s3://b/p?x-amz-credential=K/1"
    shown = redact(text)
    assert "pw@" not in shown and "bob" not in shown and "x-amz-credential" not in shown
    assert "https://h/x.zarr" in shown and "s3://b/p" in shown
    assert secret_in_url("https://h/x.zarr?version=3") is None and secret_in_url("s3://b/p.zarr") is None


def test_one_client_per_bucket_however_many_arrays_are_opened(cli, tmp_path, bucket, s3env):
    import zarr

    from zarrmill.io.storage import location
    from zarrmill.io.storage.kinds import s3

    raw = generate(cli, tmp_path / "raw")
    url = f"s3://{bucket}/p.ome.zarr"
    assert task(cli, "ingest", f"input={raw}", f"output={url}")[0] == 0
    location.reset_clients()
    paths = [f"{url}/{w}/{f}/0" for w in ("B/03", "C/04") for f in range(4)]
    for path in paths:
        zarr.open_array(location.zarr_url(as_location(path)), mode="r")[...]
    assert len(s3._STORES) == 1, "one obstore client for the bucket, not one per array"


def test_a_credential_in_the_storage_endpoint_is_refused(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "s3", "storage": {"endpoint": "https://key:s3cr3tpw@s3.example.org"},
                              "steps": {"g": {"task": "generate-plate", "params": {"output": str(tmp_path / "raw")}}}}))
    code, out, err = cli("run", str(wf))
    assert code == 2 and "s3cr3tpw" not in out + err and "storage.endpoint" in err, err
