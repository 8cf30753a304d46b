"""Two scheduled runs at the same moment as two sbatch jobs on the local SLURM."""
import subprocess
import sys
import time

import pytest
from conftest import REPO, forget_ownership

from zarrmill.io.ngff.conformance import check_store
from zarrmill.runtime.core.history import History

pytestmark = pytest.mark.slurm
WORKFLOW = REPO / "workflows" / "scheduled-cellvoyager.yaml"


def test_two_overlapping_sbatch_runs_convert_each_dataset_once(cli, slurm, tmp_path):
    for i in range(4):
        code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set",
                           f"output={tmp_path / 'incoming' / f'plate{i}'}", "--set", "wells=[B03,B04]",
                           "--set", "grid=[2,2]", "--set", "shape=[96,128]", "--set", f"seed={i}")
        assert code == 0, err
        forget_ownership(tmp_path / "incoming" / f"plate{i}")
    go = tmp_path / "go"
    command = (f"{sys.executable} -m zarrmill run {WORKFLOW} --set vars.incoming={tmp_path / 'incoming'} "
               f"--set vars.out={tmp_path / 'out'} --set executor.kind=threads "
               f"--set for_each.ready.quiet_seconds=0 --set for_each.max_concurrent=1 "
               f"--set steps.reshard.params.overview_size=32")
    jobs = []
    for k in range(2):
        script = tmp_path / f"run{k}.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --job-name=zm-sched-{k}\n#SBATCH --output={tmp_path}/run{k}.log\n"
                          f"#SBATCH --partition={slurm}\n#SBATCH --mem=1G\n#SBATCH --time=00:10:00\n"
                          f"cd {tmp_path}\nwhile [ ! -e {go} ]; do sleep 0.1; done\nexec {command}\n")
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True)
        jobs.append(out.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%T"], capture_output=True,
                                text=True).stdout.split()
        if states.count("RUNNING") == 2:
            break
        time.sleep(0.2)
    assert states.count("RUNNING") == 2, f"both jobs must run at the same moment: {states}"
    go.touch()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs)], capture_output=True, text=True).stdout.strip():
        time.sleep(0.5)
    logs = [(tmp_path / f"run{k}.log").read_text() for k in range(2)]
    history = History(tmp_path / "out" / ".zarrmill-state").all()
    done = [r.dataset for r in history if r.status == "done"]
    assert sorted(done) == [f"plate{i}" for i in range(4)], (done, logs)
    assert not [r for r in history if r.status in ("failed", "running")], logs
    assert any("locked" in log or "up to date" in log for log in logs), logs
    for i in range(4):
        assert check_store(tmp_path / "out" / f"plate{i}.ome.zarr")[0] == []
        assert check_store(tmp_path / "out" / f"plate{i}-wells.ome.zarr")[0] == []
