"""The runtime on a real one-node Grid Engine (Debian's gridengine 8.1.9, started by tests/run --services)
through dask-jobqueue's SGECluster: the same scenarios as on SLURM where they make sense."""
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import done_units, qstat_jobs, qstat_names, tree_digest
from helpers import generate_step, rechunk_step, write_workflow

pytestmark = pytest.mark.sge


def sge_executor(queue: str, tmp_path: Path, jobs: int = 2, **sge) -> dict:
    settings = {"queue": queue, "cores": 1, "memory": "1GB", "processes": 1, "walltime": "00:10:00",
                "interface": "lo"}
    settings.update(sge)
    return {"kind": "sge", "jobs": jobs, "sge": settings, "run_dir": str(tmp_path / "run"),
            "worker_start_timeout": 120}


class JobWatcher:
    """While a run lasts, polls qstat and remembers, for every job of one name, when it was last seen."""

    def __init__(self, name: str):
        self.name, self.last_seen = name, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.stop.is_set():
            for job_id, name, _ in qstat_jobs():
                if name == self.name:
                    self.last_seen[job_id] = time.monotonic()
            time.sleep(0.2)

    def __enter__(self) -> "JobWatcher":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def test_a_grid_engine_run_writes_what_one_process_writes(cli, sge, tmp_path):
    def steps(root):
        return {"gen": generate_step(root / "src.zarr"), "copy": rechunk_step(root / "src.zarr", root / "dst.zarr")}

    assert cli("run", write_workflow(tmp_path / "sync.yaml", steps(tmp_path / "sync")))[0] == 0
    wf = write_workflow(tmp_path / "sge.yaml", steps(tmp_path / "sge"), name="sge equal",
                        executor=sge_executor(sge, tmp_path))
    with JobWatcher("zm-sge-equal") as watcher:
        code, _, err = cli("run", wf)
    assert code == 0, err
    assert watcher.last_seen, "the run's worker jobs must show in qstat"
    assert tree_digest(tmp_path / "sge") == tree_digest(tmp_path / "sync")
    deadline = time.monotonic() + 30
    while "zm-sge-equal" in qstat_names() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "zm-sge-equal" not in qstat_names(), "worker jobs must be deleted at the end"


def test_step_resources_get_their_own_pools_on_grid_engine(cli, sge, tmp_path):
    steps = {"gen": {**generate_step(tmp_path / "a.zarr"), "resources": {"memory": "1GB"}},
             "copy": {**rechunk_step(tmp_path / "a.zarr", tmp_path / "b.zarr"),
                      "resources": {"memory": "2GB", "walltime": "00:05:00"}}}
    wf = write_workflow(tmp_path / "wf.yaml", steps, executor=sge_executor(sge, tmp_path, jobs=1), name="pools")
    code, out, err = cli("run", wf, "--dry-run")
    assert code == 0, err
    scripts = out.split("# worker job script for ")[1:]
    assert len(scripts) == 2 and "#$ -l h_rt=00:10:00" in scripts[0] and "#$ -l h_rt=00:05:00" in scripts[1]
    code, _, err = cli("run", wf)
    assert code == 0, err
    assert cli("check", tmp_path / "b.zarr")[0] == 0


def test_a_queue_grid_engine_rejects_fails_within_seconds_with_its_own_message(cli, sge, tmp_path):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor=sge_executor("nosuch.q", tmp_path, jobs=1), name="rejected")
    t0 = time.monotonic()
    code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 2 and time.monotonic() - t0 < 60  # a setting the cluster rejects: bad input
    assert "Grid Engine rejects the worker jobs" in line and "nosuch.q" in line, line
    assert "rejected" not in qstat_names()


def test_qdel_of_one_worker_mid_step_and_the_run_still_completes(cli, sge, tmp_path):
    out, ref = tmp_path / "out" / "img.zarr", tmp_path / "ref" / "img.zarr"
    big = dict(shape=(2, 32, 256, 256), chunks=(1, 8, 32, 32), unit_mb=0.02)
    assert cli("run", write_workflow(tmp_path / "ref.yaml", {"gen": generate_step(ref, **big)}))[0] == 0
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(out, **big)}, name="qdel-me",
                        executor=sge_executor(sge, tmp_path))
    deleted: list[str] = []

    def delete_one_when_busy():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if done_units(out, "gen") >= 10:
                ids = [i for i, name, state in qstat_jobs() if name == "zm-qdel-me" and state == "r"]
                if len(ids) >= 2:
                    subprocess.run(["qdel", ids[0]], check=True, capture_output=True)
                    deleted.append(ids[0])
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=delete_one_when_busy, daemon=True)
    killer.start()
    code, _, err = cli("run", wf)
    killer.join()
    assert deleted, "the test must really delete a worker job mid-step"
    assert code == 0, err
    assert tree_digest(out.parent) == tree_digest(ref.parent)


def test_submit_runs_the_driver_as_a_grid_engine_job(cli, sge, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor={"kind": "sync"}, name="submitted")
    code, out, err = cli("submit", wf, "--scheduler", "sge", "--time", "00:05:00", "--mem", "1G",
                         f"--directive=-q {sge}")
    assert code == 0, err
    job_id = out.split("driver job ")[1].split(";")[0]
    log = Path(out.split("log: ")[1].splitlines()[0])
    assert "qstat -j " + job_id in out and job_id in log.name
    deadline = time.monotonic() + 120
    while job_id in [i for i, _, _ in qstat_jobs()] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert log.exists(), "driver log missing"
    assert "[gen] done" in log.read_text(), log.read_text()
    code, out, _ = cli("status", tmp_path / "a.zarr")
    assert code == 0 and "done" in out


def test_a_worker_killed_at_its_run_time_limit_is_named_in_the_failure(cli, sge, tmp_path):
    """Grid Engine ends the worker job at its h_rt while a unit runs: the failure line says so and
    what to raise (from qacct's record), instead of a bare KilledWorker."""
    import dask.config
    import distributed  # noqa: F401 - its defaults must be in dask's config before config.set saves it

    executor = sge_executor(sge, tmp_path, jobs=1, walltime="00:00:20")
    executor["retries"] = 0
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 1, "busy_ms": 120000}}}, executor=executor, name="runtime")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    assert "run time" in line and "executor.sge.walltime" in line, line


@pytest.mark.parametrize("reuse", [True, False])
def test_a_step_that_fits_a_running_pool_reuses_its_workers(cli, sge, tmp_path, reuse):
    """gen asks for 2GB, copy for 1GB and 5 minutes: with reuse_workers (the default) copy runs on
    gen's running worker jobs (one set of jobs, one wait in the queue); without, it queues its own."""
    steps = {"gen": {**generate_step(tmp_path / "a.zarr"), "resources": {"memory": "2GB"}},
             "copy": {**rechunk_step(tmp_path / "a.zarr", tmp_path / "b.zarr"),
                      "resources": {"memory": "1GB", "walltime": "00:05:00"}}}
    executor = sge_executor(sge, tmp_path, jobs=1)
    executor["reuse_workers"] = reuse
    name = f"reuse-{str(reuse).lower()}"
    wf = write_workflow(tmp_path / "wf.yaml", steps, executor=executor, name=name)
    with JobWatcher(f"zm-{name}") as watcher:
        code, _, err = cli("run", wf)
    assert code == 0, err
    assert len(watcher.last_seen) == (1 if reuse else 2), watcher.last_seen
    assert cli("check", tmp_path / "b.zarr")[0] == 0


@pytest.mark.parametrize("idle", [1, 0])
def test_a_pool_no_step_used_for_idle_timeout_releases_its_jobs(cli, sge, tmp_path, idle):
    """gen runs on a 1GB pool, chk on a 2GB pool for 6 s; then last (1GB, 5 s) starts: with
    idle_timeout 1 s the first pool, idle since gen ended, releases its job when last starts and
    last runs on the 2GB pool, so the first job ends seconds before the second; with 0 the first
    pool takes last and both end with the run."""
    steps = {"gen": {**generate_step(tmp_path / "a.zarr"), "resources": {"memory": "1GB"}},
             "chk": {"task": "cluster-check", "needs": ["gen"], "resources": {"memory": "2GB"},
                     "params": {"output": str(tmp_path / "chk"), "units": 1, "busy_ms": 6000}},
             "last": {"task": "cluster-check", "needs": ["chk"], "resources": {"memory": "1GB", "walltime": "00:05:00"},
                      "params": {"output": str(tmp_path / "last"), "units": 1, "busy_ms": 5000}}}
    executor = sge_executor(sge, tmp_path, jobs=1)
    executor["idle_timeout"] = idle
    name = f"idle-{idle}"
    wf = write_workflow(tmp_path / "wf.yaml", steps, executor=executor, name=name)
    with JobWatcher(f"zm-{name}") as watcher:
        code, _, err = cli("run", wf)
    assert code == 0, err
    assert len(watcher.last_seen) == 2, watcher.last_seen  # last never queues a third pool
    first, second = sorted(watcher.last_seen.values())
    assert (second - first > 3) == bool(idle), watcher.last_seen


def test_a_run_three_times_its_workers_run_time_completes(cli, sge, tmp_path):
    """One worker job of a 30 s h_rt, 90 s of units: each job leaves before its h_rt (its lifetime)
    and the pool submits the next. Before: the run waited forever once the first job ended."""
    import json

    out = tmp_path / "chk"
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(out), "units": 45, "busy_ms": 2000}}}, name="runtime-x3",
        executor=sge_executor(sge, tmp_path, jobs=1, walltime="00:00:30"))
    code, _, err = cli("run", wf)
    assert code == 0, err
    assert done_units(out, "chk") == 45
    jobs = {json.loads(f.read_text())["job"] for f in (out / "units").glob("*.json")}
    assert len(jobs) >= 3, jobs


def test_every_worker_deleted_mid_step_is_replaced(cli, sge, tmp_path):
    """qdel of every worker job while units remain: new jobs take them, the output is the same."""
    ref, out = tmp_path / "ref" / "img.zarr", tmp_path / "out" / "img.zarr"
    big = dict(shape=(2, 32, 256, 256), chunks=(1, 8, 32, 32), unit_mb=0.02)
    assert cli("run", write_workflow(tmp_path / "ref.yaml", {"gen": generate_step(ref, **big)}))[0] == 0
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(out, **big)}, name="qdel-all",
                        executor=sge_executor(sge, tmp_path, jobs=2))
    deleted: list[str] = []

    def delete_all_when_busy():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ids = [job_id for job_id, name, _ in qstat_jobs() if name == "zm-qdel-all"]
            if done_units(out, "gen") >= 10 and len(ids) >= 2:
                subprocess.run(["qdel", *ids], check=True, capture_output=True)
                deleted.extend(ids)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=delete_all_when_busy, daemon=True)
    killer.start()
    code, _, err = cli("run", wf)
    killer.join()
    assert deleted, "the test must really delete every worker job mid-step"
    assert code == 0, err
    assert tree_digest(out.parent) == tree_digest(ref.parent)


def test_a_unit_longer_than_the_run_time_ends_the_run_instead_of_looping(cli, sge, tmp_path):
    """Each worker leaves before its h_rt (its lifetime) while the one unit still runs, so the unit
    never finishes on any job: after three rounds of jobs ended with no unit finished the run ends,
    naming the walltime, instead of submitting jobs forever."""
    executor = sge_executor(sge, tmp_path, jobs=1, walltime="00:00:30")
    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 1, "busy_ms": 600000}}}, executor=executor, name="forever")
    t0 = time.monotonic()
    code, _, err = cli("run", wf)
    line = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    assert "kept ending while one unit ran" in line and "raise executor.sge.walltime" in line, line
    assert time.monotonic() - t0 < 240
