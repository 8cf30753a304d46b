"""The runtime on a real single-node SLURM through dask-jobqueue."""
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import done_units, squeue_names, tree_digest
from helpers import generate_step, jobqueue_config, rechunk_step, write_workflow

pytestmark = pytest.mark.slurm


def slurm_executor(partition: str, tmp_path: Path, jobs: int = 2, **slurm) -> dict:
    settings = {"queue": partition, "cores": 1, "memory": "1GB", "processes": 1,
                "walltime": "00:10:00", "interface": "lo"}
    settings.update(slurm)
    return {"kind": "slurm", "jobs": jobs, "slurm": settings, "run_dir": str(tmp_path / "run"),
            "worker_start_timeout": 90}


class QueueWatcher(threading.Thread):
    """Polls squeue while a workflow runs and remembers every job name it saw."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: set[str] = set()
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.seen.update(squeue_names())
            time.sleep(0.3)


def test_slurm_run_matches_sync_bytes_and_ignores_local_tasks_py(cli, slurm, tmp_path, monkeypatch):
    def steps(root):
        return {"gen": generate_step(root / "src.zarr"),
                "copy": rechunk_step(root / "src.zarr", root / "dst.zarr")}

    assert cli("run", write_workflow(tmp_path / "sync.yaml", steps(tmp_path / "sync")))[0] == 0
    # A user's own tasks.py in the submit folder must never shadow the package on the workers.
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    (submit_dir / "zarrmill.py").write_text("raise SystemExit('the user tasks.py was imported')\n")
    monkeypatch.chdir(submit_dir)
    # paths relative to the folder zarrmill is started from, as getting-started/hpc.md writes them:
    # the workers resolve them there too
    wf = write_workflow(tmp_path / "slurm.yaml", steps(Path("..") / "slurm"), name="slurm equal/bytes",
                        executor=slurm_executor(slurm, tmp_path))
    watcher = QueueWatcher()
    watcher.start()
    try:
        code, _, err = cli("run", wf)
    finally:
        watcher.stop.set()
        watcher.join()
    assert code == 0, err
    assert "zm-slurm-equal-bytes" in watcher.seen, watcher.seen
    assert tree_digest(tmp_path / "slurm") == tree_digest(tmp_path / "sync")
    # cancelled at the end: gone from the queue once SLURM has reaped them (COMPLETING takes a moment)
    deadline = time.monotonic() + 30
    while "zm-slurm-equal-bytes" in squeue_names() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "zm-slurm-equal-bytes" not in squeue_names(), "worker jobs must be cancelled at the end"


def test_scancel_one_worker_mid_step_still_completes(cli, slurm, tmp_path):
    out = tmp_path / "out" / "img.zarr"
    ref = tmp_path / "ref" / "img.zarr"
    big = dict(shape=(2, 32, 256, 256), chunks=(1, 8, 32, 32), unit_mb=0.02)
    assert cli("run", write_workflow(tmp_path / "ref.yaml", {"gen": generate_step(ref, **big)}))[0] == 0
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(out, **big)}, name="scancel-me",
                        executor=slurm_executor(slurm, tmp_path))
    cancelled: list[str] = []

    def cancel_one_when_busy():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if done_units(out, "gen") >= 10:
                ids = subprocess.run(["squeue", "-h", "-n", "zm-scancel-me", "-o", "%i"],
                                     capture_output=True, text=True).stdout.split()
                if len(ids) >= 2:
                    subprocess.run(["scancel", ids[0]], check=True)
                    cancelled.append(ids[0])
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=cancel_one_when_busy, daemon=True)
    killer.start()
    code, _, err = cli("run", wf)
    killer.join()
    assert cancelled, "the test must really cancel a worker job mid-step"
    assert code == 0, err
    assert tree_digest(out.parent) == tree_digest(ref.parent)


def test_worker_that_cannot_start_is_reported_with_state_and_log(cli, slurm, tmp_path):
    executor = slurm_executor(slurm, tmp_path, jobs=1, python="/nonexistent/python")
    executor["worker_start_timeout"] = 240
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor=executor, name="broken-python")
    t0 = time.monotonic()
    code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 1
    assert "no SLURM worker connected" in line and "FAILED" in line
    assert "/nonexistent/python" in line, "the job's .err log must be quoted"
    # noticed from the job's state, not by waiting out worker_start_timeout
    assert time.monotonic() - t0 < executor["worker_start_timeout"], "a dead job must be noticed before the timeout"


def test_submit_runs_the_driver_as_a_batch_job(cli, slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor={"kind": "sync"}, name="submitted")
    code, out, err = cli("submit", wf, "--time", "00:05:00", "--mem", "1G",
                         f"--sbatch-arg=--partition={slurm}")
    assert code == 0, err
    job_id = out.split("driver job ")[1].split(";")[0]
    log = Path(out.split("log: ")[1].splitlines()[0])
    deadline = time.monotonic() + 120
    while job_id in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                   text=True).stdout.split() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert log.exists(), "driver log missing"
    assert "[gen] done" in log.read_text(), log.read_text()
    code, out, _ = cli("status", tmp_path / "a.zarr")
    assert code == 0 and "done" in out


def test_hcs_chain_on_four_slurm_workers_matches_single_process(cli, slurm, tmp_path):
    """generate-plate -> ingest -> pyramid -> reshard (+ overview) with 4 worker jobs vs sync."""
    def steps(root):
        return {
            "acquire": {"task": "generate-plate", "params": {
                "output": str(root / "raw"), "wells": ["B03", "C04"], "grid": [3, 3], "shape": [96, 128],
                "z_planes": 2, "overlap": 0.05, "jitter_um": 0.5}},
            "ingest": {"task": "ingest", "needs": ["acquire"], "params": {
                "input": str(root / "raw"), "output": str(root / "plate.zarr")}},
            "pyramid": {"task": "pyramid", "needs": ["ingest"], "params": {
                "input": str(root / "plate.zarr"), "min_size": 32}},
            "reshard": {"task": "reshard", "needs": ["pyramid"], "params": {
                "input": str(root / "plate.zarr"), "overlap": "mean", "overview": True,
                "overview_size": 64, "min_size": 64, "shard_mb": 1, "unit_mb": 0.1}},
        }

    assert cli("run", write_workflow(tmp_path / "sync.yaml", steps(tmp_path / "sync")))[0] == 0
    wf = write_workflow(tmp_path / "slurm.yaml", steps(tmp_path / "slurm"), name="hcs-chain",
                        executor=slurm_executor(slurm, tmp_path, jobs=4))
    code, _, err = cli("run", wf)
    assert code == 0, err
    sync, slurm_out = tree_digest(tmp_path / "sync"), tree_digest(tmp_path / "slurm")
    assert set(sync) == set(slurm_out) and len([k for k in sync if "/c/" in k]) > 50
    for rel in (k for k in sync if sync[k] != slurm_out[k]):
        # only metadata naming its own absolute folder may differ, and only by that folder
        a = (tmp_path / "sync" / rel).read_text().replace(str(tmp_path / "sync"), "ROOT")
        b = (tmp_path / "slurm" / rel).read_text().replace(str(tmp_path / "slurm"), "ROOT")
        assert a == b, rel


def test_patch_extract_on_slurm_workers_matches_one_process(cli, slurm, tmp_path):
    import numpy as np

    image = tmp_path / "img.zarr"
    gen = {"task": "generate", "params": {"output": str(image), "shape": [40, 96, 96], "chunks": [8, 32, 32],
                                          "n_blobs": 60, "pixel_size": [4.0, 1.0, 1.0]}}
    assert cli("run", write_workflow(tmp_path / "gen.yaml", {"gen": gen}))[0] == 0
    rng = np.random.default_rng(4)
    np.save(tmp_path / "pts.npy", rng.uniform(0, 1, (500, 3)) * [40, 96, 96])

    def step(out):
        return {"cut": {"task": "patch-extract", "params": {
            "input": str(image), "output": str(out), "points": str(tmp_path / "pts.npy"), "cuboid": [5, 16, 16],
            "network_voxel_size": [4.0, 2.0, 2.0], "edge": "pad", "patches_per_shard": 16, "patches_per_unit": 64}}}

    assert cli("run", write_workflow(tmp_path / "one.yaml", step(tmp_path / "one.zarr")))[0] == 0
    wf = write_workflow(tmp_path / "many.yaml", step(tmp_path / "many.zarr"), name="patches",
                        executor=slurm_executor(slurm, tmp_path, jobs=3))
    code, _, err = cli("run", wf)
    assert code == 0, err
    assert tree_digest(tmp_path / "one.zarr") == tree_digest(tmp_path / "many.zarr")


def test_step_resources_get_their_own_pools_and_adapt_scales_from_zero(cli, slurm, tmp_path):
    import json

    def check(name, units):
        return {"task": "cluster-check", "params": {"output": str(tmp_path / name), "units": units, "busy_ms": 50}}

    executor = slurm_executor(slurm, tmp_path, jobs=1)
    executor.pop("jobs")
    executor["adapt"] = {"minimum_jobs": 0, "maximum_jobs": 2}
    steps = {"small": check("small", 12), "big": {**check("big", 12), "needs": ["small"],
                                                    "resources": {"memory": "2GB", "cores": 1}}}
    code, _, err = cli("run", write_workflow(tmp_path / "wf.yaml", steps, executor=executor, name="pools"))
    assert code == 0, err

    def jobs_of(name):
        return {json.loads(f.read_text())["job"] for f in (tmp_path / name / "units").glob("*.json")}

    small, big = jobs_of("small"), jobs_of("big")
    assert None not in small | big and small and big
    assert not small & big, "a step with other resources must run in its own pool of jobs"
    def memory_mb(job: str) -> float:
        info = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        value = re.search(r"MinMemoryNode=([0-9.]+)([MG])", info)
        assert value, info  # finished jobs stay visible for MinJobAge=300 s
        return float(value.group(1)) * (1024 if value.group(2) == "G" else 1)

    assert memory_mb(next(iter(big))) > 1.5 * memory_mb(next(iter(small)))


def test_workers_talk_tls_and_dashboards_listen_on_localhost(slurm, tmp_path):
    """Scheduler, workers and client use TLS with credentials made for the run; the worker key
    lands in the run folder readable by its owner only."""
    from zarrmill.runtime.execution.executors import Executor
    from zarrmill.runtime.execution.spec import ExecutorSpec

    spec = ExecutorSpec(**slurm_executor(slurm, tmp_path, jobs=1))
    with Executor(spec, "tls", tmp_path / "run") as executor:
        client = executor.client_for(None)
        assert client.scheduler.address.startswith("tls://"), client.scheduler.address
        workers = client.scheduler_info()["workers"]
        assert workers and all(addr.startswith("tls://") for addr in workers), workers
        assert client.submit(sum, [1, 2]).result() == 3
        assert "127.0.0.1" in client.dashboard_link
        keys = list((tmp_path / "run").glob(".zarrmill-tls-*"))
        assert len(keys) == 2 and all(k.stat().st_mode & 0o077 == 0 for k in keys), keys
    assert not list((tmp_path / "run").glob(".zarrmill-tls-*")), "the run's key is deleted when it ends"


def test_a_partition_slurm_rejects_fails_within_seconds_with_sbatchs_message(cli, slurm, tmp_path):
    executor = slurm_executor(slurm, tmp_path, jobs=1, queue="no-such-partition")
    executor["worker_start_timeout"] = 240
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor=executor, name="bad-partition")
    t0 = time.monotonic()
    code, _, err = cli("run", wf)
    # sbatch --test-only refuses before any job is queued: the run never waits for a worker
    assert time.monotonic() - t0 < executor["worker_start_timeout"], "an sbatch rejection must end the run at once"
    assert not [n for n in squeue_names() if "bad-partition" in n]
    line = err.strip().splitlines()[-1]
    # a setting the cluster rejects is bad input (exit 2), and the rejected run leaves no run folder
    assert code == 2 and "SLURM rejects the worker jobs" in line and "invalid partition" in line, err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_the_users_jobqueue_config_wins(slurm, tmp_path, monkeypatch):
    """local-directory, scheduler-options and python from the user's jobqueue.yaml are used as they are."""
    from zarrmill.runtime.execution.jobqueue import cluster_kwargs as slurm_cluster_kwargs
    from zarrmill.runtime.execution.spec import ExecutorSpec

    config = {"local-directory": str(tmp_path / "scratch"), "python": "/opt/site/python3",
              "scheduler-options": {"dashboard_address": ":8799", "port": 0}}
    with jobqueue_config({f"jobqueue.slurm.{k}": v for k, v in config.items()}):
        (tmp_path / "run").mkdir()
        kw = slurm_cluster_kwargs(ExecutorSpec(kind="slurm", slurm={"queue": slurm}), "w", tmp_path / "run", None)
        assert "python" not in kw and "local_directory" not in kw  # dask-jobqueue reads them from the config
        assert kw["scheduler_options"]["dashboard_address"] == ":8799" and kw["scheduler_options"]["port"] == 0
        from dask_jobqueue import SLURMCluster

        kw["scheduler_options"]["dashboard_address"] = "127.0.0.1:0"
        from zarrmill.runtime.execution.run_credentials import write_run_credentials

        kw["security"] = write_run_credentials(tmp_path / "run", [])  # as start_pool does
        with SLURMCluster(**kw) as cluster:
            script = cluster.job_script()
    assert "/opt/site/python3 -m distributed.cli.dask_worker" in script
    assert f"--local-directory {tmp_path / 'scratch'}" in script


def test_a_worker_killed_at_its_walltime_is_named_in_the_failure(cli, slurm, tmp_path):
    """SLURM ends the worker job at its walltime while a unit runs: the failure line says so and
    what to raise, instead of a bare KilledWorker."""
    import dask.config
    import distributed  # noqa: F401 - its defaults must be in dask's config before config.set saves it

    # a lifetime past the walltime: the worker does not leave before it (as it would by default,
    # see test_bad_day.py), so SLURM kills the job mid-unit
    executor = slurm_executor(slurm, tmp_path, jobs=1, walltime="00:01:00", worker_extra_args=["--lifetime", "1h"])
    executor["retries"] = 0
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 1, "busy_ms": 240000}}}, executor=executor, name="walltime")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):  # the first lost worker fails the unit
        code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    assert "TIMEOUT" in line and "raise executor.slurm.walltime" in line, line


@pytest.mark.parametrize("who", ["slurm", "dask"])
def test_a_worker_over_its_memory_is_named_in_the_failure(cli, slurm, tmp_path, who):
    """A unit grows past the worker job's --mem (past what it declared, so the budget lets it
    start): SLURM kills the job (dask's own memory guard off) or dask's nanny restarts the worker first; either way the failure line says "out of memory" and
    which setting to raise, instead of a bare KilledWorker."""
    import dask.config
    import distributed  # noqa: F401 - its defaults must be in dask's config before config.set saves it

    # dask's nanny polls every 100 ms while the unit grows 80 MB a poll: its default terminate point
    # (95 % of 600 MB) left one poll's margin before SLURM's hard limit, a race a loaded machine lost
    # (SLURM killed first); at 60 % it has three polls' margin, and the worker idles far below it
    prologue = ["export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False"] if who == "slurm" else [
        "export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=0.6"]
    executor = slurm_executor(slurm, tmp_path, jobs=1, memory="600MB", job_script_prologue=prologue)
    executor["retries"] = 0
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 1, "busy_ms": 20000, "hold_mb": 1200, "declare_mb": 100}}},
        executor=executor, name=f"oom-{who}")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    expected = "OUT_OF_MEMORY" if who == "slurm" else "restarted by dask"
    assert expected in line and "raise executor.slurm.memory" in line, line


def test_every_instrument_format_ingests_on_slurm_workers_as_in_one_process(cli, slurm, tmp_path):
    """Each new instrument format, generated once, then ingested (layout: well) in one workflow on
    SLURM workers: the same bytes as the same workflow in one process (both read the same folders:
    the well tables name their source)."""
    formats = ("cq", "metaxpress", "hcsai", "operetta", "scanr")
    generated = {f"gen-{fmt}": {"task": "generate-plate", "params": {
        "output": str(tmp_path / "raw" / fmt), "format": fmt, "wells": ["B03", "C04"], "grid": [1, 2],
        "shape": [32, 40], "z_planes": 2, "timepoints": 2, "plate_shape": [8, 12]}} for fmt in formats}
    assert cli("run", write_workflow(tmp_path / "gen.yaml", generated))[0] == 0

    def steps(root: Path) -> dict:
        out = {}
        for fmt in formats:
            params = {"input": str(tmp_path / "raw" / fmt), "output": str(root / f"{fmt}.zarr"), "layout": "well",
                      "min_size": 16}
            if fmt in ("metaxpress", "hcsai"):
                params["plate_shape"] = [8, 12]
            out[f"ingest-{fmt}"] = {"task": "ingest", "params": params}
        return out

    assert cli("run", write_workflow(tmp_path / "sync.yaml", steps(tmp_path / "sync")))[0] == 0
    code, _, err = cli("run", write_workflow(tmp_path / "slurm.yaml", steps(tmp_path / "slurm"), name="formats",
                                             executor=slurm_executor(slurm, tmp_path)))
    assert code == 0, err
    for fmt in formats:
        assert tree_digest(tmp_path / "slurm" / f"{fmt}.zarr") == tree_digest(tmp_path / "sync" / f"{fmt}.zarr"), fmt


def test_ingest_to_s3_on_slurm_workers_writes_what_one_process_writes(cli, slurm, tmp_path, bucket, s3env):
    """SLURM workers take the endpoint and credentials from the environment of the job (as every
    AWS client does); the job scripts hold no credential."""
    raw = tmp_path / "raw"
    assert cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}", "--set", "wells=[B03,C04]",
               "--set", "grid=[2,2]", "--set", "shape=[48,64]", "--set", "z_planes=2")[0] == 0

    def steps(out: str) -> dict:
        return {"ingest": {"task": "ingest", "params": {"input": str(raw), "output": out, "layout": "well",
                                                         "min_size": 16}}}

    assert cli("run", write_workflow(tmp_path / "sync.yaml", steps(str(tmp_path / "disk.zarr"))))[0] == 0
    code, _, err = cli("run", write_workflow(tmp_path / "slurm.yaml", steps(f"s3://{bucket}/p.ome.zarr"),
                                             name="s3 slurm", executor=slurm_executor(slurm, tmp_path)))
    assert code == 0, err
    from test_object_store import digest_objects

    assert digest_objects(s3env.objects(f"{bucket}/p.ome.zarr")) == tree_digest(tmp_path / "disk.zarr")
    for script in (tmp_path / "run").rglob("*"):
        if script.is_file():
            assert s3env.secret.encode() not in script.read_bytes(), script
