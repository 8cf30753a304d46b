"""Worker job scripts on every scheduler (no scheduler needed): what ``--dry-run`` prints is what
dask-jobqueue's own cluster class of that scheduler generates with the same settings, in each
scheduler's documented directive syntax; step resources become that scheduler's limits; a value
that would break a job script is refused naming the setting, on every scheduler."""
from __future__ import annotations

import re

import pytest
from helpers import generate_step, jobqueue_config, write_workflow

from zarrmill.errors import ConfigError
from zarrmill.runtime.execution.jobqueue import cluster_kwargs, render_job_script
from zarrmill.runtime.execution.run_credentials import RUN_CREDENTIALS, write_run_credentials
from zarrmill.runtime.execution.schedulers import SCHEDULERS
from zarrmill.runtime.execution.spec import ExecutorSpec, Resources

DIRECTIVES = {  # scheduler -> patterns its documented syntax takes for cores, memory, run time
    "slurm": [r"^#SBATCH -n 1$", r"^#SBATCH --cpus-per-task=2$", r"^#SBATCH --mem=\d+[MG]$", r"^#SBATCH -t 00:20:00$"],
    "sge": [r"^#\$ -N zm-wf$", r"^#\$ -l h_rt=00:20:00$", r"^#\$ -q all\.q$"],
    "pbs": [r"^#PBS -N zm-wf$", r"^#PBS -l select=1:ncpus=2:mem=\d+MB$", r"^#PBS -l walltime=00:20:00$"],
    "lsf": [r"^#BSUB -J zm-wf$", r"^#BSUB -n 2$", r"^#BSUB -M \d+$", r"^#BSUB -W 00:20$"],
    "htcondor": [r"^RequestCpus = MY\.DaskWorkerCores$", r"^MY\.DaskWorkerCores = 2$",
                 r"^RequestMemory = floor\(MY\.DaskWorkerMemory / 1048576\)$", r"^Queue$"],
}
QUEUE = {"slurm": {"queue": "debug"}, "sge": {"queue": "all.q"}, "pbs": {}, "lsf": {}, "htcondor": {}}


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_a_job_script_is_dask_jobqueues_own_in_the_schedulers_syntax(tmp_path, kind):
    batch = SCHEDULERS[kind]
    spec = ExecutorSpec(kind=kind, **{kind: {**QUEUE[kind], "memory": "2GB"}})
    resources = Resources(cores=2, walltime="00:20:00")
    script = render_job_script(spec, "wf", tmp_path / "run", resources)
    for pattern in DIRECTIVES[kind]:
        assert re.search(pattern, script, re.M), f"{pattern!r} not in\n{script}"
    # dask-jobqueue's cluster class, given the same settings, writes the same script (its
    # scheduler's address and TLS files aside, which exist only once a run starts)
    kwargs = cluster_kwargs(spec, "wf", tmp_path / "run", resources)
    (tmp_path / "run").mkdir()  # where a run keeps the workers' TLS files
    assert kwargs["security"] == RUN_CREDENTIALS  # made when the pool starts (start_pool), as here
    kwargs["security"] = write_run_credentials(tmp_path / "run", [])
    cluster = batch.cluster()(**kwargs)
    try:
        theirs = cluster.job_script()
    finally:
        cluster.close()

    def plain(text: str) -> str:  # a cluster's template names its worker "dummy-name"; each job its own
        text = text.replace("dummy-name", "zm-wf")
        text = re.sub(r"tls://\S+:\d+", "ADDRESS", text.replace("tls://DRIVER-HOST:PORT", "ADDRESS"))
        return re.sub(r"\S*\.zarrmill-tls-\w+\.(\w+)", r"TLS-\1", text)

    assert plain(script) == plain(theirs)


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_a_value_that_would_break_a_job_script_is_refused_on_every_scheduler(tmp_path, kind):
    spec = ExecutorSpec(kind=kind, **{kind: {"job_extra_directives": ["-l x\nrm -rf $HOME"]}})
    with pytest.raises(ConfigError, match=f"executor.{kind}.job_extra_directives"):
        cluster_kwargs(spec, "wf", tmp_path / "run", None)
    with pytest.raises(ConfigError, match="shell characters"):
        cluster_kwargs(ExecutorSpec(kind=kind), "wf", tmp_path / "run dir; id", None)


@pytest.mark.parametrize("kind", ["pbs", "lsf", "htcondor"])
def test_dry_run_prints_a_job_script_for_schedulers_not_at_hand(cli, tmp_path, kind):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor={"kind": kind, "run_dir": str(tmp_path / "run")})
    code, out, err = cli("run", wf, "--dry-run")
    assert code == 0, err
    assert "# worker job script for gen (not submitted)" in out
    assert {"pbs": "#PBS ", "lsf": "#BSUB ", "htcondor": "Executable = /bin/sh"}[kind] in out
    assert not (tmp_path / "run").exists() and not (tmp_path / "a.zarr").exists()


def test_lsf_run_limits_are_hours_and_minutes():
    from zarrmill.runtime.execution.schedulers.lsf import lsf_walltime

    assert [lsf_walltime(v) for v in ("01:00:00", "00:30:30", "2:05", "90")] == ["01:00", "00:31", "2:05", "90"]
    with pytest.raises(ConfigError, match="LSF takes"):
        lsf_walltime("1 hour")


def test_a_setting_another_schedulers_cluster_takes_is_refused_with_a_hint():
    with pytest.raises(Exception, match="'resource_spec' is not a SLURMCluster setting"):
        ExecutorSpec(kind="slurm", slurm={"resource_spec": "h_vmem=4G"})
    with pytest.raises(Exception, match="'walltime' is not a HTCondorCluster setting"):
        ExecutorSpec(kind="htcondor", htcondor={"walltime": "01:00:00"})


@pytest.mark.parametrize("kind,lines", [
    ("pbs", ["#PBS -N zm-driver-wf", "#PBS -l walltime=02:00:00", "#PBS -l select=1:ncpus=1:mem=4GB", "#PBS -A lab"]),
    ("lsf", ["#BSUB -J zm-driver-wf", "#BSUB -W 02:00", '#BSUB -R "rusage[mem=4G]"', "#BSUB -A lab"]),
    ("sge", ["#$ -N zm-driver-wf", "#$ -l h_rt=02:00:00", "#$ -o ", "#$ -A lab"]),
    ("htcondor", ["batch_name = zm-driver-wf", "request_memory = 4G", "executable = ", "queue"]),
])
def test_submit_prints_the_driver_job_in_each_schedulers_syntax(cli, tmp_path, kind, lines):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")}, executor={"kind": kind})
    directive = [] if kind == "htcondor" else ["--directive=-A lab"]
    code, out, err = cli("submit", wf, "--print", "--time", "02:00:00", "--mem", "4G", *directive)
    assert code == 0, err
    for line in lines:
        assert line in out, f"{line!r} not in\n{out}"
    assert "exec " in out and "-m zarrmill run" in out
    code, _, err = cli("submit", wf, "--print", "--directive=-l x\nrm -rf ~")
    assert code == 2 and "newline" in err


RUN_TIME = {"slurm": r"^#SBATCH -t {}:00$", "sge": r"^#\$ -l h_rt={}:00$", "pbs": r"^#PBS -l walltime={}:00$",
            "lsf": r"^#BSUB -W {}$"}


@pytest.mark.parametrize("kind", sorted(RUN_TIME))
def test_a_job_runs_zarrmills_hour_unless_the_user_chose_a_walltime(tmp_path, kind):
    """dask-jobqueue's packaged 30 minutes (its jobqueue.yaml, loaded when it is imported) is no
    choice of the user's: a job asks for zarrmill's hour (docs/how-to/cluster-checklist.md). A
    walltime in the user's jobqueue config wins over the hour, and the workflow's over both."""
    spec = ExecutorSpec(kind=kind, **{kind: QUEUE[kind]})
    script = render_job_script(spec, "wf", tmp_path / "run", None)
    assert re.search(RUN_TIME[kind].format("01:00"), script, re.M), script
    with jobqueue_config({f"jobqueue.{kind}.walltime": "02:00:00"}):
        script = render_job_script(spec, "wf", tmp_path / "run", None)
        assert re.search(RUN_TIME[kind].format("02:00"), script, re.M), script
        mine = ExecutorSpec(kind=kind, **{kind: {**QUEUE[kind], "walltime": "00:45:00"}})
        script = render_job_script(mine, "wf", tmp_path / "run", None)
        assert re.search(RUN_TIME[kind].format("00:45"), script, re.M), script
