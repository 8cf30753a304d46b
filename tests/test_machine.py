"""Worker sizing from what the process is granted: affinity, cgroup limits (v1 and v2), SLURM."""
import os

import pytest

from zarrmill.runtime.execution.machine import available_cpus, available_memory


def test_cgroup_v2_quota_and_memory_limit(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "memory.max").write_text(str(3 * 2**30))
    assert available_cpus(tmp_path, {}) == 1  # 1.5 CPUs of quota: one worker
    assert available_memory(tmp_path, {}) == 3 * 2**30


def test_cgroup_v1_and_no_limit(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2**63 - 4096))
    assert available_cpus(tmp_path, {}) == len(os.sched_getaffinity(0))
    import psutil

    assert available_memory(tmp_path, {}) == psutil.virtual_memory().total
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    assert available_cpus(tmp_path, {}) == 1


def test_a_slurm_allocation_caps_cpus_and_memory(tmp_path):
    env = {"SLURM_CPUS_ON_NODE": "1", "SLURM_MEM_PER_NODE": "2048"}
    assert available_cpus(tmp_path, env) == 1
    assert available_memory(tmp_path, env) == 2048 * 2**20
    (tmp_path / "cpu.max").write_text("max 100000")
    assert available_cpus(tmp_path, {}) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("variable", ["NSLOTS", "NCPUS", "LSB_DJOB_NUMPROC", "_CONDOR_NPROCS"])
def test_every_schedulers_allocation_caps_cpus(tmp_path, variable):
    """A local cluster inside a 1-slot Grid Engine, PBS, LSF or HTCondor job gets one worker."""
    assert available_cpus(tmp_path, {variable: "1"}) == 1
    assert available_cpus(tmp_path, {variable: "not a number"}) == len(os.sched_getaffinity(0))
