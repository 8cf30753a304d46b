"""Engine on real stores: resume after SIGKILL, failures, changed parameters, executors agree."""
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
from conftest import bookkeeping, done_units, tree_digest, zarrmill_subprocess
from helpers import generate_step, rechunk_step, write_workflow


def done_count(root: Path, step: str) -> int:
    return done_units(root, step)


def test_sigkill_mid_step_then_rerun_resumes_with_identical_bytes(tmp_path):
    # long enough (about 3 s of units) that the ledger is flushed to disk mid-step (once a second)
    big = dict(shape=(2, 32, 512, 512), chunks=(1, 8, 32, 32), unit_mb=0.02)
    ref = write_workflow(tmp_path / "ref.yaml", {"gen": generate_step(tmp_path / "ref" / "img.zarr", **big)})
    assert zarrmill_subprocess("run", ref).returncode == 0

    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "out" / "img.zarr", **big)})
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "run", str(wf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while done_count(tmp_path / "out" / "img.zarr", "gen") < 20 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = done_count(tmp_path / "out" / "img.zarr", "gen")
    total = 2 * 4 * 16 * 16
    assert 20 <= killed_at < total, "the kill must land mid-step"

    rerun = zarrmill_subprocess("run", wf)
    assert rerun.returncode == 0, rerun.stderr
    skipped = int(rerun.stderr.split("units, ")[1].split(" already done")[0])
    assert skipped >= killed_at - 1  # at most the torn last record is redone
    assert tree_digest(tmp_path / "out") == tree_digest(tmp_path / "ref")
    again = zarrmill_subprocess("run", wf)
    assert again.returncode == 0 and "already done" in again.stderr, again.stderr
    assert tree_digest(tmp_path / "out") == tree_digest(tmp_path / "ref")


def test_resuming_an_interrupted_step_removes_temp_files_a_kill_left(cli, tmp_path):
    """A process killed mid-write leaves ``<chunk>.<uuid>.partial`` (zarr, zarrmill) or
    ``<chunk>.__lock`` (tensorstore's chunk writes); resuming deletes them (the unit that wrote
    them is redone), so the output ends as an uninterrupted run's."""
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "out" / "img.zarr")})
    assert cli("run", wf)[0] == 0
    clean = tree_digest(tmp_path / "out")
    step = bookkeeping(tmp_path / "out" / "img.zarr") / "steps" / "gen"
    rec = json.loads((step / "step.json").read_text())
    rec["state"] = "running"  # as a kill leaves it
    (step / "step.json").write_text(json.dumps(rec))
    records = sorted((step / "done").iterdir())
    lines = records[-1].read_text().splitlines()
    records[-1].write_text("\n".join(lines[:-1]) + "\n")  # the last unit was not recorded
    chunk = next(p for p in (tmp_path / "out" / "img.zarr" / "0" / "c").rglob("*") if p.is_file())
    stray = chunk.with_name(chunk.name + ".0123abcd.partial")
    stray.write_bytes(b"half a chunk")
    torn = chunk.with_name(chunk.name + ".__lock")
    torn.write_bytes(b"half a shard")
    code, _, err = cli("run", wf)
    assert code == 0, err
    assert not stray.exists() and not torn.exists()
    assert tree_digest(tmp_path / "out") == clean


def test_failed_unit_is_named_others_finish_and_rerun_completes(cli, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(src),
                                               "copy": rechunk_step(src, dst)})
    assert cli("run", wf)[0] == 0
    good = np.asarray(zarr.open_array(str(dst / "0"))[:])
    chunk = next(p for p in (src / "0" / "c").rglob("*") if p.is_file())
    saved = chunk.read_bytes()
    chunk.write_bytes(b"not a blosc chunk")
    code, _, err = cli("run", wf, "--overwrite", "--set", "steps.copy.params.codec.clevel=3")
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert "step 'copy' (rechunk): 1 of" in line and "unit 0:" in line and "region" in line
    status = cli("status", dst)[1]
    assert "partial" in status
    chunk.write_bytes(saved)
    code, _, err = cli("run", wf, "--set", "steps.copy.params.codec.clevel=3")
    assert code == 0, err
    # the input changed since the units were done (the chunk was rewritten): every unit is redone
    assert "inputs changed since the last run: 1 file" in err, err
    np.testing.assert_array_equal(zarr.open_array(str(dst / "0"))[:], good)


def test_changed_params_refused_without_overwrite(cli, tmp_path):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")})
    assert cli("run", wf)[0] == 0
    code, _, err = cli("run", wf, "--set", "steps.gen.params.seed=5")
    assert code == 2 and "seed: 0 -> 5" in err and "--overwrite" in err
    assert cli("run", wf, "--set", "steps.gen.params.seed=5", "--overwrite")[0] == 0


def test_existing_foreign_output_refused(cli, tmp_path):
    zarr.create_array(str(tmp_path / "a.zarr" / "0"), shape=(4,), dtype="uint8")
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")})
    code, _, err = cli("run", wf)
    assert code == 2 and "not created by zarrmill" in err
    assert sorted(p.name for p in (tmp_path / "a.zarr").iterdir()) == ["0"]  # nothing added


@pytest.mark.parametrize("kind", ["threads", "local"])
def test_executors_write_identical_bytes(cli, tmp_path, kind):
    def run(name, executor):
        src, dst = tmp_path / name / "src.zarr", tmp_path / name / "dst.zarr"
        steps = {"gen": generate_step(src), "copy": rechunk_step(src, dst)}
        wf = write_workflow(tmp_path / f"{name}.yaml", steps, executor={"kind": executor, "workers": 2})
        code, _, err = cli("run", wf)
        assert code == 0, err
        return tree_digest(tmp_path / name)

    assert run("sync", "sync") == run(kind, kind)


def test_downstream_step_reruns_when_an_upstream_step_changed(cli, tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(src), "copy": rechunk_step(src, dst)})
    assert cli("run", wf)[0] == 0
    code, _, err = cli("run", wf, "--set", "steps.gen.params.seed=9", "--overwrite")
    assert code == 0, err
    assert "[copy] already done" not in err
    np.testing.assert_array_equal(zarr.open_array(str(dst / "0"))[:], zarr.open_array(str(src / "0"))[:])


def test_executor_clients_never_become_dasks_default_scheduler(tmp_path):
    """Otherwise closing several pools (per-step resources) in creation order left dask pointing at
    a closed scheduler, and the user's own dask code (e.g. ome-zarr-py reads) failed afterwards."""
    import dask
    import dask.array as da

    from zarrmill.runtime.execution.executors import Executor
    from zarrmill.runtime.execution.spec import ExecutorSpec

    with Executor(ExecutorSpec(kind="threads", workers=1), "t", tmp_path) as ex:
        client = ex.client_for(None)
        assert client.status == "running"
        assert dask.config.get("scheduler", None) != "dask.distributed"
        assert int(da.ones(10, chunks=5).sum().compute()) == 10  # plain dask, not the client
    assert int(da.ones(10, chunks=5).sum().compute()) == 10


@pytest.mark.parametrize("kind", ["sync", "threads", "local"])
def test_a_failing_unit_is_one_line_on_every_executor_with_the_traceback_in_the_log(tmp_path, kind):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(src), "copy": rechunk_step(src, dst)},
                        executor={"kind": kind, **({"workers": 1} if kind == "local" else {})})
    assert zarrmill_subprocess("run", wf, "--step", "gen").returncode == 0
    chunk = next(p for p in (src / "0" / "c").rglob("*") if p.is_file())
    chunk.write_bytes(b"not a blosc chunk")
    proc = zarrmill_subprocess("run", wf)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert "step 'copy' (rechunk): 1 of" in line and "unit 0:" in line and "RuntimeError" in line, line
    log = Path(line.split("full log: ")[1])
    assert log == bookkeeping(dst) / "steps" / "copy" / "errors.log"
    assert "Traceback" in log.read_text() and "decompression" in log.read_text()


def test_fingerprints_hash_metadata_not_chunks(tmp_path):
    """A rerun reads every small metadata file, never the chunks of a large input."""
    from zarrmill.io.storage.fingerprint import fingerprint

    (tmp_path / "zarr.json").write_text("{}")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "0").write_bytes(b"\0" * 100)
    fp = fingerprint([tmp_path])
    name = tmp_path.name  # files are named from the input's own folder down (the same through any mount)
    assert len(fp[f"{name}/zarr.json"]) == 3 and len(fp[f"{name}/c/0"]) == 2


def test_the_local_executor_runs_gil_free_tasks_on_threads_and_the_rest_on_processes(cli, tmp_path):
    """ingest-like tasks (WORKERS = THREADS) run in the driver's process on the default executor;
    cluster-check (pure-Python spinning) in worker processes; a user-sized executor keeps processes."""
    import json
    import os

    from zarrmill.runtime.execution.executors import Executor
    from zarrmill.runtime.execution.registry import get_task
    from zarrmill.runtime.execution.spec import ExecutorSpec

    assert get_task("ingest").workers == "threads" and get_task("cluster-check").workers == "processes"
    with Executor(ExecutorSpec(kind="local"), "t", tmp_path / "run") as ex:
        threads = ex.client_for(None, "threads")
        processes = ex.client_for(None, "processes")
        assert all(a.startswith("inproc://") for a in threads.scheduler_info()["workers"])
        assert all(a.startswith("tcp://") for a in processes.scheduler_info()["workers"])
        assert threads.submit(os.getpid).result() == os.getpid() != processes.submit(os.getpid).result()
    with Executor(ExecutorSpec(kind="local", workers=1), "t", tmp_path / "run2") as ex:
        assert all(a.startswith("tcp://") for a in ex.client_for(None, "threads").scheduler_info()["workers"])
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 2}}}, executor={"kind": "local"})
    assert cli("run", wf)[0] == 0
    pids = {json.loads(f.read_text())["pid"] for f in (tmp_path / "chk" / "units").glob("*.json")}
    assert os.getpid() not in pids
