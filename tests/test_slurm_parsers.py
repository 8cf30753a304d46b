"""Pure parsers of SLURM command output, on captured text; job scripts as dask-jobqueue renders them."""
import os
import shlex

import pytest
from helpers import jobqueue_config

from zarrmill.runtime.execution.jobqueue import cluster_kwargs as slurm_cluster_kwargs
from zarrmill.runtime.execution.schedulers.base import sanitize_job_name
from zarrmill.runtime.execution.schedulers.slurm import (
    SlurmCommandError,
    parse_sacct_states,
    parse_sbatch_parsable,
    parse_scontrol_job,
)
from zarrmill.runtime.execution.spec import ExecutorSpec, Resources

SACCT = """12|COMPLETED|0:0
12.batch|COMPLETED|0:0
13|FAILED|3:0
14|CANCELLED by 0|0:15
"""


def test_parse_sacct():
    assert parse_sacct_states(SACCT) == {"12": ("COMPLETED", "0:0"), "13": ("FAILED", "3:0"),
                                         "14": ("CANCELLED", "0:15")}


def test_parse_sbatch():
    assert parse_sbatch_parsable("4711\n") == "4711"
    assert parse_sbatch_parsable("4711;cluster\n") == "4711"
    with pytest.raises(SlurmCommandError):
        parse_sbatch_parsable("sbatch: error: invalid partition")


def test_parse_scontrol():
    text = "JobId=5 JobName=x\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0\n"
    info = parse_scontrol_job(text)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "3:0"


def test_job_names_sanitised():
    assert sanitize_job_name("my plate/2024 run #3") == "my-plate-2024-run-3"
    assert sanitize_job_name("///") == "zarrmill"
    assert len(sanitize_job_name("x" * 100)) == 40


def test_slurm_kwargs_layering(tmp_path):
    spec = ExecutorSpec(kind="slurm", slurm={"queue": "debug", "memory": "2GB",
                                             "job_script_prologue": ["module load x"]})
    kw = slurm_cluster_kwargs(spec, "my wf", tmp_path, Resources(cores=2, walltime="00:10:00"))
    assert kw["memory"] == "2GB" and kw["cores"] == 2 and kw["walltime"] == "00:10:00"
    assert kw["queue"] == "debug" and kw["job_name"] == "zm-my-wf"
    assert kw["job_script_prologue"][0] == "export PYTHONSAFEPATH=1"
    # workers start where zarrmill was started: relative paths name the same files there
    assert kw["job_script_prologue"][-2:] == [f"cd {shlex.quote(os.getcwd())}", "module load x"]
    assert kw["log_directory"] == str(tmp_path / "logs")


def test_slurm_workers_offer_their_share_of_the_jobs_memory(tmp_path):
    """A job of 4 GB with 2 worker processes: dask-jobqueue gives each 2 GB, each offers 60 % of it."""
    spec = ExecutorSpec(kind="slurm", slurm={"memory": "4GB", "processes": 2, "cores": 2,
                                             "worker_extra_args": ["--nthreads", "1"]})
    kw = slurm_cluster_kwargs(spec, "w", tmp_path, None)
    lifetime = ["--lifetime", "3240s", "--lifetime-stagger", "180s"]  # zarrmill's hour of walltime
    assert kw["worker_extra_args"] == ["--nthreads", "1", "--resources", "MEMORY=1200000000", *lifetime]
    assert kw["worker_extra_args"] is not spec.slurm["worker_extra_args"]  # the workflow's list is left as it was
    assert spec.slurm["worker_extra_args"] == ["--nthreads", "1"]
    mine = slurm_cluster_kwargs(ExecutorSpec(kind="slurm", slurm={"memory": "1GB", "worker_extra_args": [
        "--resources", "GPU=1"]}), "w", tmp_path, None)
    assert mine["worker_extra_args"] == ["--resources", "GPU=1 MEMORY=600000000", *lifetime]


def test_slurm_kwargs_respect_jobqueue_config(tmp_path):
    with jobqueue_config({"jobqueue.slurm.memory": "7GB", "jobqueue.slurm.cores": 3}):
        kw = slurm_cluster_kwargs(ExecutorSpec(kind="slurm"), "w", tmp_path, None)
    assert "memory" not in kw and "cores" not in kw  # left for dask-jobqueue to read from its config


def test_job_scripts_pass_bash_n_and_refuse_what_would_be_split_or_run(tmp_path):
    """The worker job script dask-jobqueue renders from our settings passes ``bash -n``; the run
    folder is quoted where zarrmill writes it. dask-jobqueue itself writes paths (local directory,
    TLS key files, logs) unquoted, so a run folder with spaces or shell characters is refused, and
    so is a newline in any value that reaches the script; each error names the setting."""
    import subprocess

    from dask_jobqueue import SLURMCluster

    from zarrmill.errors import ConfigError

    run = tmp_path / "run"
    run.mkdir()
    kw = slurm_cluster_kwargs(ExecutorSpec(kind="slurm", slurm={"queue": "debug", "cores": 1, "memory": "1GB"}),
                              "w", run, None)
    from zarrmill.runtime.execution.run_credentials import write_run_credentials

    kw["security"] = write_run_credentials(run, [])  # as start_pool does
    with SLURMCluster(**kw) as cluster:
        script = cluster.job_script()
    assert f"cd {shlex.quote(os.getcwd())}" in script and "--tls-key" in script
    assert "--resources MEMORY=600000000" in script  # each worker offers 60 % of its 1 GB (runtime/core/budget.py)
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    with pytest.raises(ConfigError, match="executor.run_dir.*shell characters"):
        slurm_cluster_kwargs(ExecutorSpec(kind="slurm"), "w", tmp_path / "run dir; touch PWNED $(id)", None)
    with pytest.raises(ConfigError, match="executor.slurm.local_directory"):
        slurm_cluster_kwargs(ExecutorSpec(kind="slurm", slurm={"local_directory": "/tmp/a b"}), "w", run, None)
    for key, bad in (("walltime", "01:00:00\nrm -rf ~"), ("queue", "debug\ncurl x | sh"),
                     ("job_extra_directives", ["--account=lab", "--x\ntouch /tmp/pwned"])):
        with pytest.raises(ConfigError, match=f"executor.slurm.{key}.*newline"):
            slurm_cluster_kwargs(ExecutorSpec(kind="slurm", slurm={key: bad}), "w", run, None)


def test_submit_refuses_newlines_in_sbatch_values(tmp_path):
    from zarrmill.errors import ConfigError
    from zarrmill.runtime.front.submit import driver_script

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: x\nsteps: {}\n")
    script, _ = driver_script(wf, ["vars.x=a b"], "01:00:00", "4G", ["--account=lab"], tmp_path / "logs", False)
    assert "'vars.x=a b'" in script
    for args in (("01:00:00\nrm -rf ~", "4G", []), ("01:00:00", "4G", ["--qos=x\ntouch /tmp/p"])):
        with pytest.raises(ConfigError, match="newline"):
            driver_script(wf, [], args[0], args[1], args[2], tmp_path, False)


def test_an_entry_point_cannot_replace_a_built_in_task(monkeypatch):
    from importlib.metadata import EntryPoint

    from zarrmill.errors import ConfigError
    from zarrmill.runtime.execution import registry

    fake = EntryPoint(name="ingest", value="evil_pkg.ingest", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [fake])
    registry.task_modules.cache_clear()
    try:
        with pytest.raises(ConfigError, match="replace zarrmill's built-in task"):
            registry.task_modules()
    finally:
        registry.task_modules.cache_clear()


def test_dry_run_prints_each_pools_job_script_and_writes_nothing(cli, tmp_path, monkeypatch):
    import subprocess

    import yaml

    monkeypatch.chdir(tmp_path)
    wf = tmp_path / "wf.yaml"
    wf.write_text(yaml.safe_dump({"name": "dry", "executor": {"kind": "slurm", "slurm": {
        "queue": "debug", "memory": "1GB", "job_extra_directives": ["--comment='a b; c'"],
        "job_script_prologue": ["module load 'x y'"]}},
        "steps": {"a": {"task": "generate", "params": {"output": "a.zarr", "shape": [4, 8, 8]}},
                  "b": {"task": "rechunk", "needs": ["a"], "resources": {"memory": "2GB"},
                        "params": {"input": "a.zarr", "output": "b.zarr"}}}}))
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli("run", wf, "--dry-run")
    assert code == 0, err
    scripts = out.split("# worker job script for ")[1:]
    assert [s.split(" ")[0] for s in scripts] == ["a", "b"]
    assert "--mem=954M" in scripts[0] and "--mem=2G" in scripts[1] and "--protocol tls://" in scripts[0]
    for script in scripts:
        body = script.split("\n", 1)[1]
        check = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a dry run writes nothing"


def test_scontrol_job_lines_parse_and_end_reasons_are_named():
    from zarrmill.runtime.execution.schedulers.slurm import END_REASONS, parse_scontrol_jobs

    text = ("JobId=12 JobName=zm-a UserId=root(0) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15\n"
            "JobId=13 JobName=zm-a JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125\n"
            "JobId=14 JobName=other JobState=RUNNING\n")
    jobs = parse_scontrol_jobs(text)
    assert [(j["JobId"], j["JobState"]) for j in jobs] == [("12", "TIMEOUT"), ("13", "OUT_OF_MEMORY"), ("14", "RUNNING")]
    assert "walltime" in END_REASONS["TIMEOUT"] and "memory" in END_REASONS["OUT_OF_MEMORY"]


def test_jobs_ended_before_the_run_started_are_not_blamed(monkeypatch):
    import time

    from zarrmill.runtime.execution.schedulers import slurm

    text = ("JobId=1 JobName=zm-a JobState=TIMEOUT SubmitTime=2020-01-01T00:00:00\n"
            f"JobId=2 JobName=zm-a JobState=OUT_OF_MEMORY SubmitTime={time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    monkeypatch.setattr(slurm, "run_slurm", lambda args, **kw: text)
    ended = slurm.ended_jobs({"zm-a"}, since=time.time() - 60)
    assert len(ended) == 1 and ended[0].startswith("worker job 2 OUT_OF_MEMORY (ran out of memory")


def test_a_memory_kill_recorded_as_failed_is_named_out_of_memory(tmp_path):
    """Without cgroups SLURM's OverMemoryKill ends a job FAILED; its log says why. The log path
    scontrol shows is dask-jobqueue's pattern (%J)."""
    from zarrmill.runtime.execution.schedulers.slurm import end_state, job_log_path

    (tmp_path / "zm-a-77.err").write_text("worker started\nslurmstepd-vm: error: StepId=77.batch exceeded "
                                         "memory limit (226902016 > 209715200), being killed\n")
    (tmp_path / "zm-a-78.err").write_text("worker started\nKeyError: x\n")
    job = {"JobId": "77", "JobName": "zm-a", "JobState": "FAILED", "StdErr": str(tmp_path / "%x-%J.err")}
    assert job_log_path(job) == tmp_path / "zm-a-77.err"
    assert end_state(job) == "OUT_OF_MEMORY"
    assert end_state({**job, "JobId": "78"}) == "FAILED"
    assert end_state({**job, "JobState": "COMPLETED"}) == "COMPLETED"


# -- what a cluster's bad day reads (issue 68) ---------------------------------------------------
PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES MaxTime=UNLIMITED "
    "MaxCPUsPerNode=UNLIMITED MaxMemPerNode=UNLIMITED State=UP\n"
    "PartitionName=short AllowGroups=ALL AllowAccounts=lab1,lab2 AllowQos=normal Default=NO MaxTime=00:30:00 "
    "MaxCPUsPerNode=4 MaxMemPerNode=8000 State=UP\n")


def worker_script(tmp_path, **slurm) -> str:
    from zarrmill.runtime.execution.jobqueue import render_job_script

    return render_job_script(ExecutorSpec(kind="slurm", slurm=slurm), "w", tmp_path / "run", None)


def test_a_worker_script_is_judged_against_its_partitions_limits(tmp_path):
    from zarrmill.runtime.execution.schedulers.slurm import (parse_scontrol_jobs_like, partition_problems,
                                                              script_directives)

    parts = parse_scontrol_jobs_like(PARTITIONS, "PartitionName=")

    def problems(**slurm):
        return partition_problems(script_directives(worker_script(tmp_path, **slurm)), parts)

    assert problems(queue="short", walltime="00:20:00", memory="4GB", cores=2, account="lab1") == []
    assert problems(walltime="30-00:00:00", memory="400GB", cores=64) == []  # the default partition: unlimited
    (line,) = problems(queue="short", walltime="01:00:00", account="lab1")
    assert "executor.slurm.walltime" in line and "01:00:00" in line and "MaxTime 00:30:00" in line, line
    assert "MaxMemPerNode" in problems(queue="short", walltime="00:20:00", memory="16GB", account="lab1")[0]
    assert "MaxCPUsPerNode" in problems(queue="short", walltime="00:20:00", cores=8, account="lab1")[0]
    assert "account" in problems(queue="short", walltime="00:20:00", account="other")[0]
    assert partition_problems(script_directives(worker_script(tmp_path, queue="nosuch")), parts) == []  # sbatch says


def test_squeue_reasons_that_never_clear_name_the_setting():
    from zarrmill.runtime.execution.schedulers.slurm import SCHEDULER, parse_squeue_states

    text = "57|PENDING|PartitionTimeLimit\n58|PENDING|Resources\n59|RUNNING|None\n60|PENDING|ReqNodeNotAvail, UnavailableNodes:n3\n"
    states = parse_squeue_states(text)
    assert states == {"57": ("PENDING", "PartitionTimeLimit"), "58": ("PENDING", "Resources"),
                      "59": ("RUNNING", ""), "60": ("PENDING", "ReqNodeNotAvail, UnavailableNodes:n3")}
    assert "executor.slurm.walltime" in SCHEDULER.pending_problem("PartitionTimeLimit")
    assert SCHEDULER.pending_problem("Resources") is None and SCHEDULER.pending_problem("Priority") is None
    # nodes down, drained or reserved come back: waited for (at most worker_start_timeout with no worker)
    assert SCHEDULER.pending_problem(states["60"][1]) is None and SCHEDULER.pending_unsure(states["60"][1])
    assert not SCHEDULER.pending_unsure("Resources") and not SCHEDULER.pending_unsure("PartitionTimeLimit")


def test_a_worker_leaves_before_its_walltime_and_the_users_lifetime_wins(tmp_path):
    from zarrmill.runtime.execution.jobqueue import lifetime_of

    assert lifetime_of(3600) == (3240, 180)  # a tenth of the hour, stagger half of it
    assert lifetime_of(60) == (50, 5)
    assert lifetime_of(20) is None and lifetime_of(float("inf")) is None
    script = worker_script(tmp_path, walltime="01:00:00")
    assert "--lifetime 3240s --lifetime-stagger 180s" in script, script
    own = worker_script(tmp_path, walltime="01:00:00", worker_extra_args=["--lifetime", "20m"])
    assert "--lifetime 20m" in own and "3240s" not in own


def test_the_job_name_of_the_users_jobqueue_config_is_kept(tmp_path):
    (tmp_path / "run").mkdir()
    assert slurm_cluster_kwargs(ExecutorSpec(kind="slurm"), "w", tmp_path / "run", None)["job_name"] == "zm-w"
    with jobqueue_config({"jobqueue.slurm.name": "lab-worker"}):
        assert slurm_cluster_kwargs(ExecutorSpec(kind="slurm"), "w", tmp_path / "run", None)["job_name"] == "lab-worker"


def test_the_driver_job_inherits_partition_and_account_unless_given():
    from zarrmill.runtime.execution.schedulers.slurm import SCHEDULER

    settings = {"queue": "gpu", "account": "lab1"}
    assert SCHEDULER.inherited_directives(settings, []) == ["--partition=gpu", "--account=lab1"]
    assert SCHEDULER.inherited_directives(settings, ["--partition=short"]) == ["--account=lab1"]
    assert SCHEDULER.inherited_directives(settings, ["-p short", "-A other"]) == []
