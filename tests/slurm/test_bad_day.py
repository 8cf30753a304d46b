"""A cluster's bad day on the real single-node SLURM: Ctrl-C and SIGTERM of a run, every worker job
cancelled mid-step, a run longer than its workers' walltime, a job the partition would never start,
a pending reason that never clears, and submit refusing what a run would refuse before queueing."""
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import done_units, squeue_names, tree_digest
from helpers import generate_step, write_workflow
from slurm.test_slurm_executor import slurm_executor

pytestmark = pytest.mark.slurm


def executor(partition: str, tmp_path: Path, jobs: int = 1, **slurm) -> dict:
    return slurm_executor(partition, tmp_path, jobs=jobs, **slurm)


def check_step(out: Path, units: int, busy_ms: int) -> dict:
    return {"chk": {"task": "cluster-check", "params": {"output": str(out), "units": units, "busy_ms": busy_ms}}}


def start(*args: object, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zarrmill", *map(str, args)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def jobs_named(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout
    return out.split()


def unit_jobs(out: Path) -> set[str]:
    return {json.loads(f.read_text())["job"] for f in (out / "units").glob("*.json")}


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"),
                                           (signal.SIGTERM, 143, "terminated")])
def test_an_interrupted_run_never_exits_0_and_cancels_its_jobs(slurm, tmp_path, sig, code, word):
    """Before: Ctrl-C of a SLURM run exited 0 (dask-jobqueue's import set SIGINT to sys.exit())."""
    out = tmp_path / "chk"
    name = f"sig-{code}"
    wf = write_workflow(tmp_path / "wf.yaml", check_step(out, 40, 1000), name=name,
                        executor=executor(slurm, tmp_path))
    proc = start("run", wf)
    try:
        wait_for(lambda: done_units(out, "chk") >= 3, 120, "units must run before the signal")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert f"zarrmill: {word}" in err and "rerun the same command to resume" in err, err
    assert "Traceback" not in err, err
    wait_for(lambda: f"zm-{name}" not in squeue_names(), 30, "the worker jobs must be cancelled")
    assert not list((tmp_path / "run").glob(".zarrmill-tls-*")), "the run's TLS key must be deleted"
    assert done_units(out, "chk") < 40


def test_every_worker_cancelled_mid_step_is_replaced_and_the_output_is_identical(cli, slurm, tmp_path):
    """Before: the run waited forever once its last worker job was gone."""
    ref, out = tmp_path / "ref" / "img.zarr", tmp_path / "out" / "img.zarr"
    big = dict(shape=(2, 32, 256, 256), chunks=(1, 8, 32, 32), unit_mb=0.02)
    assert cli("run", write_workflow(tmp_path / "ref.yaml", {"gen": generate_step(ref, **big)}))[0] == 0
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(out, **big)}, name="cancel-all",
                        executor=executor(slurm, tmp_path, jobs=2))
    proc = start("run", wf)
    try:
        wait_for(lambda: done_units(out, "gen") >= 10 and len(jobs_named("zm-cancel-all")) == 2, 120,
                 "two worker jobs must be running units")
        first = jobs_named("zm-cancel-all")
        subprocess.run(["scancel", *first], check=True)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert tree_digest(out.parent) == tree_digest(ref.parent)
    assert done_units(out, "gen") > 10


def test_a_run_three_times_its_workers_walltime_completes(slurm, tmp_path):
    """One worker job of a one-minute walltime, 150 s of units: each job leaves before its
    walltime (its lifetime) and the pool submits the next. Before: the run hung at 42 of 150."""
    out = tmp_path / "chk"
    wf = write_workflow(tmp_path / "wf.yaml", check_step(out, 75, 2000), name="walltime-x3",
                        executor=executor(slurm, tmp_path, walltime="00:01:00"))
    proc = start("run", wf)
    try:
        _, err = proc.communicate(timeout=420)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert done_units(out, "chk") == 75
    assert len(unit_jobs(out)) >= 3, unit_jobs(out)


@contextmanager
def partition(name: str, **limits: str):
    """A partition of the one node with these limits, for one test."""
    extra = [f"{k}={v}" for k, v in limits.items()]
    subprocess.run(["scontrol", "create", f"PartitionName={name}", "Nodes=ALL", *extra], check=True)
    try:
        yield name
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={name}"], check=False)


def test_a_walltime_over_the_partitions_maxtime_is_one_line_in_seconds(cli, slurm, tmp_path):
    """sbatch --test-only lets it through (limits are enforced only when a job would start): the
    partition's MaxTime is read before anything is submitted. Before: PENDING, then 300 s."""
    runs = tmp_path / "runs"
    with partition("zmshort", MaxTime="1"):
        spec = executor("zmshort", tmp_path, walltime="00:10:00")
        spec.pop("run_dir")
        wf = write_workflow(tmp_path / "wf.yaml", check_step(tmp_path / "chk", 4, 10), name="too-long",
                            executor=spec)
        t0 = time.monotonic()
        env = {**os.environ, "ZARRMILL_RUNS_DIR": str(runs)}
        proc = subprocess.run([sys.executable, "-m", "zarrmill", "run", str(wf)], capture_output=True, text=True,
                              env=env, timeout=120)
        took = time.monotonic() - t0
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr
    assert took < 30, took
    assert "executor.slurm.walltime" in line and "MaxTime" in line and "zmshort" in line, line
    assert "zm-too-long" not in squeue_names()
    assert not [p for p in runs.glob("*") if p.name != "logs"], "a rejected run leaves no run folder"


def test_a_pending_reason_that_never_clears_is_one_line(slurm, tmp_path):
    """A worker job whose dependency can never be met (a job that failed): squeue's reason is read
    while the run waits, and ends it with exit 2 instead of worker_start_timeout."""
    failed = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "false"], capture_output=True,
                            text=True, check=True).stdout.strip().split(";")[0]
    wait_for(lambda: "FAILED" in subprocess.run(["squeue", "-h", "-t", "all", "-j", failed, "-o", "%T"],
                                                capture_output=True, text=True).stdout, 60, "the job must fail")
    spec = executor(slurm, tmp_path, job_extra_directives=[f"--dependency=afterok:{failed}"])
    spec["worker_start_timeout"] = 300
    wf = write_workflow(tmp_path / "wf.yaml", check_step(tmp_path / "chk", 4, 10), name="never", executor=spec)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "zarrmill", "run", str(wf)], capture_output=True, text=True,
                          timeout=200)
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - t0 < 30
    assert "DependencyNeverSatisfied" in line and "job_extra_directives" in line, line
    wait_for(lambda: "zm-never" not in squeue_names(), 30, "the pending job must be cancelled")


def test_submit_refuses_a_missing_partition_before_queueing(cli, slurm, tmp_path, monkeypatch):
    """Before: 'submitted driver job 49', exit 0, and the job failed a second later."""
    monkeypatch.chdir(tmp_path)
    wf = write_workflow(tmp_path / "wf.yaml", check_step(tmp_path / "chk", 4, 10), name="nowhere",
                        executor=executor("no-such-partition", tmp_path))
    before = set(squeue_names())
    code, out, err = cli("submit", wf, "--time", "00:05:00", "--mem", "1G", "--log-dir", tmp_path / "logs")
    assert code == 2, (out, err)
    assert "invalid partition" in err.lower() and "worker jobs" in err, err
    assert "submitted" not in out
    assert not (tmp_path / "logs").exists(), "nothing is written before the checks pass"
    assert set(squeue_names()) <= before


def test_submit_refuses_a_walltime_the_partition_never_runs_and_the_driver_inherits_it(cli, slurm, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    with partition("zmshort2", MaxTime="2"):
        wf = write_workflow(tmp_path / "wf.yaml", check_step(tmp_path / "chk", 4, 10), name="inherit",
                            executor=executor("zmshort2", tmp_path, walltime="00:01:00"))
        code, out, err = cli("submit", wf, "--time", "00:05:00", "--mem", "1G", "--print")
        assert code == 0, err
        assert "#SBATCH --partition=zmshort2" in out, out
        # the driver's own --time is over the partition's MaxTime: refused before it is queued
        code, out, err = cli("submit", wf, "--time", "00:05:00", "--mem", "1G", "--log-dir", tmp_path / "logs")
        assert code == 2 and "the driver job" in err and "MaxTime" in err, err
        code, out, err = cli("submit", wf, "--time", "00:02:00", "--mem", "1G", "--log-dir", tmp_path / "logs")
        assert code == 0, err
        job_id = out.split("driver job ")[1].split(";")[0]
        info = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
        assert "Partition=zmshort2" in info, info
        wait_for(lambda: job_id not in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                                      text=True).stdout.split(), 120, "the driver must end")
