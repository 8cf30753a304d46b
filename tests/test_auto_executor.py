"""``executor.kind: auto`` (the default) chooses per step by the plan: threads in this process for a
plan that fits here, worker processes for a large one of a task that holds the GIL; one line says
which and why. The in-process pool keeps the memory budget like dask's workers do (#39)."""
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from conftest import tree_digest, zarrmill_subprocess
from helpers import generate_step, rechunk_step, write_workflow

from zarrmill.runtime.core.budget import PlanSize, budget_of
from zarrmill.runtime.core.units import TypedUnit
from zarrmill.runtime.execution.step_run import StepOptions
from zarrmill.runtime.execution.executors import Executor
from zarrmill.runtime.execution.registry import get_task
from zarrmill.runtime.execution.spec import ExecutorSpec
from zarrmill.runtime.execution.unit_runners import InProcessPool, run_in_threads


def check_units(tmp_path: Path, units: int, *sets: str) -> tuple[subprocess.CompletedProcess, int]:
    """``zarrmill task cluster-check`` with the default executor: (its result, the driver's pid)."""
    args = [sys.executable, "-m", "zarrmill", "task", "cluster-check", "--set", f"output={tmp_path / 'out'}",
            "--set", f"units={units}"]
    for s in sets:
        args += ["--set", s]
    with subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as driver:
        out, err = driver.communicate(timeout=300)
    return subprocess.CompletedProcess(args, driver.returncode, out, err), driver.pid


def unit_pids(tmp_path: Path) -> set[int]:
    return {json.loads(f.read_text())["pid"] for f in (tmp_path / "out" / "units").glob("*.json")}


def test_a_small_plan_runs_on_threads_in_this_process_and_says_why(tmp_path):
    proc, driver = check_units(tmp_path, 6, "hold_mb=1")  # 6 units declaring 9 MB each
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "runs on" in x)
    assert "threads in this process" in line and "6 units, 57 MB held in all" in line, line
    assert "dashboard" not in proc.stderr
    assert unit_pids(tmp_path) == {driver}, "every unit ran in the driver's own process"
    assert not (tmp_path / "zarrmill-runs").exists(), "no cluster folder for an in-process run"


def test_a_large_plan_of_a_gil_bound_task_starts_worker_processes(tmp_path):
    proc, driver = check_units(tmp_path, 12)  # units declare nothing: their size is unknown
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "dashboard:" in x)
    assert "(12 units: worker processes" in line, line
    assert unit_pids(tmp_path) and driver not in unit_pids(tmp_path)


def test_threads_tasks_run_in_process_and_write_what_local_writes(tmp_path):
    runs = []
    for kind in ("auto", "local"):
        steps = {"gen": generate_step(tmp_path / kind / "img.zarr"),
                 "rechunk": rechunk_step(tmp_path / kind / "img.zarr", tmp_path / kind / "re.zarr")}
        runs.append(zarrmill_subprocess("run", write_workflow(tmp_path / f"{kind}.yaml", steps, {"kind": kind}),
                                        cwd=tmp_path))
    assert all(p.returncode == 0 for p in runs), [p.stderr for p in runs]
    line = next(x for x in runs[0].stderr.splitlines() if x.startswith("[rechunk] runs on"))
    assert "in this process (the task's units spend their time in codecs that release the GIL)" in line, line
    assert "[rechunk] dashboard:" in runs[1].stderr
    assert tree_digest(tmp_path / "auto") == tree_digest(tmp_path / "local")


def test_the_choice_follows_the_plan():
    ex = Executor(ExecutorSpec(kind="auto"), "t", Path("/nonexistent-run-dir"))
    assert ex.auto_choice("threads", PlanSize(10_000, 1 << 30, 10_000 << 30, True))[0] == "inprocess"
    assert ex.auto_choice("processes", PlanSize(1, 0, 0, False))[0] == "inprocess"
    assert ex.auto_choice("processes", PlanSize(50, 1 << 20, 50 << 20, True))[0] == "inprocess"
    assert ex.auto_choice("processes", PlanSize(50, 0, 0, False))[0] == "local"
    assert ex.auto_choice("processes", PlanSize(50, 1 << 30, 50 << 30, True))[0] == "local"
    resumed = PlanSize(50, 1 << 30, 50 << 30, True).left(1)  # a resume with one unit left
    assert (resumed.units, resumed.total) == (1, 1 << 30)
    assert ex.auto_choice("processes", resumed)[0] == "inprocess"
    huge = budget_of(ex._local_worker_memory("local")) + 1
    assert ex.auto_choice("processes", PlanSize(50, huge, 50 * huge, True))[0] == "inprocess"
    sized = Executor(ExecutorSpec(kind="auto", workers=2), "t", Path("/nonexistent-run-dir"))
    assert sized._kind("threads") == "local", "workers set: the user sized processes"


def test_the_in_process_pool_keeps_units_within_the_memory_budget(tmp_path):
    """Units of 20 MB each (12 held + 8 overhead) on 4 threads with a 45 MB budget: two at a time,
    never three; with room for all four, four at a time."""
    task = get_task("cluster-check")
    for budget, most in ((45 << 20, 2), (200 << 20, 4)):
        out = tmp_path / f"b{most}"
        params = task.params_model(output=str(out), units=8, busy_ms=300, hold_mb=12)
        units = [TypedUnit(id=str(i), memory=20 << 20) for i in range(8)]  # as plan() declares them
        (out / "units").mkdir(parents=True)
        results = list(run_in_threads(task, params, units, InProcessPool(4, budget), StepOptions(retries=0)))
        assert [r[2] for r in results] == [None] * 8
        spans = [(d["started"], d["ended"]) for d in (json.loads(f.read_text()) for f in (out / "units").glob("*.json"))]
        assert len(spans) == 8
        at_once = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        assert at_once == most, (budget, at_once)


def test_a_failing_unit_is_reported_once_and_the_others_finish(tmp_path):
    task = get_task("cluster-check")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "units").write_text("a file where the units' folder goes")
    params = task.params_model(output=str(tmp_path / "out"), units=3, record=True)
    t0 = time.monotonic()
    results = list(run_in_threads(task, params, [{"id": str(i)} for i in range(3)], InProcessPool(2, None),
                                  StepOptions(retries=1, error_log=tmp_path / "errors.log")))
    assert time.monotonic() - t0 < 30
    assert len(results) == 3 and all(r[2] and "task cluster-check, unit" in r[2] for r in results), results
    assert (tmp_path / "errors.log").read_text().count("--- unit") == 3, "one traceback per unit, after its retries"


def test_version_and_task_list_answer_fast():
    """The work the CLI does to answer (its CPU seconds: the suite runs on two workers on two cores,
    where wall time measures the neighbour's load as much as zarrmill's imports)."""
    for args in (["--version"], ["tasks"]):
        best = min(_cpu_seconds([sys.executable, "-m", "zarrmill", *args]) for _ in range(5))
        assert best < 0.5, (args, best)


def _cpu_seconds(cmd: list[str]) -> float:
    """User + system CPU seconds of one run of ``cmd`` (its process and theirs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
