"""Pure parsers of SLURM command output, on captured text."""
import pytest

from zarrmill.runtime.executors import slurm_cluster_kwargs
from zarrmill.runtime.slurm import (
    SlurmCommandError,
    parse_sacct_states,
    parse_sbatch_parsable,
    parse_scontrol_job,
    sanitize_job_name,
)
from zarrmill.runtime.spec import ExecutorSpec, Resources

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
    assert kw["job_script_prologue"][-2:] == [f"cd {tmp_path}", "module load x"]
    assert kw["log_directory"] == str(tmp_path / "logs")


def test_slurm_kwargs_respect_jobqueue_config(tmp_path):
    import dask.config

    with dask.config.set({"jobqueue.slurm.memory": "7GB", "jobqueue.slurm.cores": 3}):
        kw = slurm_cluster_kwargs(ExecutorSpec(kind="slurm"), "w", tmp_path, None)
    assert "memory" not in kw and "cores" not in kw  # left for dask-jobqueue to read from its config
