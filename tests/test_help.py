"""Help that answers (#50 item 3), through the real CLI in-process: per-task ``--help`` with every
parameter and an example, whole task summaries, the closest name wherever a name is looked up,
exit 2 with one line for bad input (1 only for a failed run or a store with problems), and every
size and run time of every scheduler checked when the workflow is validated."""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from helpers import jobqueue_config

from zarrmill.runtime.execution.registry import get_task, task_modules, task_names


def one_line(code: int, err: str, expected_code: int = 2) -> str:
    """The single error line of a command that must fail with ``expected_code``."""
    lines = err.strip().splitlines()
    assert code == expected_code and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert "unexpected" not in err and "please report it" not in err, err
    return lines[0]


def workflow(path: Path, executor: dict | None = None, steps: dict | None = None, **top) -> Path:
    doc = {"name": "t", "executor": executor or {"kind": "sync"}, **top,
           "steps": steps or {"gen": {"task": "generate", "params": {"output": str(path.parent / "a.zarr"),
                                                                     "shape": [4, 8, 8]}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# -- 1. per-task --help and whole summaries -------------------------------------------------------
@pytest.mark.parametrize("name", task_names())
def test_every_task_help_lists_every_parameter_with_type_default_and_an_example(cli, name):
    code, out, err = cli("task", name, "--help")
    assert code == 0 and err == "", err
    assert out.startswith(f"usage: zarrmill task {name} --set PARAM=VALUE"), out[:200]
    fields = get_task(name).params_model.model_fields
    for param, field in fields.items():
        line = next((ln for ln in out.splitlines() if ln.startswith(f"  {param}: ")), None)
        assert line is not None, f"{name} --help lacks {param}"
        assert line.endswith("; required") if field.is_required() else "; default " in line, line
        if field.description:  # the description, on the one line after it
            after = out.splitlines()[out.splitlines().index(line) + 1]
            assert after.startswith("      ") and after.strip() and "\n" not in after, after
    example = out.split("\nexample:\n", 1)[1].splitlines()[0].strip()
    assert example.startswith(f"zarrmill task {name} --set "), example
    required = [p for p, f in fields.items() if f.is_required()]
    assert all(f"--set {p}=" in example or f"--set '{p}=" in example for p in required), (required, example)
    # the same text as zarrmill tasks NAME, and not the generic help of the task command
    assert cli("tasks", name)[1] == out and "positional arguments" not in out


def test_task_help_without_a_name_is_the_command_help_and_points_at_the_per_task_one(cli):
    code, out, _ = cli("task", "--help")
    assert code == 0 and "positional arguments" in out and "zarrmill task NAME --help" in out


def _first_paragraph(name: str) -> str:
    spec = importlib.util.find_spec(task_modules()[name].split(":")[0])
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""
    return re.sub(r"``([^`]+)``", r"\1", " ".join(doc.split("\n\n")[0].split()))


def test_tasks_lists_each_summary_as_a_whole_sentence(cli):
    code, out, _ = cli("tasks")
    lines = {ln.split(None, 1)[0]: ln.split(None, 1)[1] for ln in out.splitlines()}
    assert code == 0 and sorted(lines) == sorted(task_names())
    for name, summary in lines.items():
        paragraph = _first_paragraph(name)
        assert paragraph.startswith(summary) and summary[-1] in ".!?", (name, summary)
        rest = paragraph[len(summary):]
        assert rest == "" or rest[0] == " ", f"{name}: the summary stops mid-sentence: {summary!r}"
    # a summary whose sentence wraps over lines of the docstring is shown whole
    wrapped = [n for n in task_names() if "\n" in (get_task(n).doc.split("\n\n")[0].split(". ")[0])]
    assert wrapped and all(len(lines[n]) > len(get_task(n).summary) for n in wrapped), wrapped


# -- 2. the closest name, wherever a name is looked up --------------------------------------------
@pytest.mark.parametrize("args", [("task", "injest"), ("task", "injest", "--help"), ("tasks", "injest")],
                         ids=["task", "task-help", "tasks"])
def test_a_misspelt_task_name_names_the_closest(cli, args):
    line = one_line(*cli(*args)[::2])
    assert "unknown task 'injest'" in line and "did you mean 'ingest'?" in line, line


def test_a_misspelt_parameter_is_reported_as_unknown_before_the_one_it_meant_is_missing(cli, tmp_path):
    code, _, err = cli("task", "ingest", "--executor", "sync", "--set", "inptu=raw",
                       "--set", f"output={tmp_path / 'o.zarr'}")
    line = one_line(code, err)
    assert "params.inptu: unknown field; did you mean 'input'?" in line, line
    assert "required field is missing" not in line and "(+1 more problem)" in line, line  # 'input' comes next


def test_a_misspelt_parameter_in_a_workflow_names_the_closest(cli, tmp_path):
    wf = workflow(tmp_path / "wf.yaml", steps={"gen": {"task": "generate", "params": {
        "output": str(tmp_path / "a.zarr"), "shape": [4, 8, 8], "n_blob": 3}}})
    line = one_line(*cli("validate", wf)[::2])
    assert "steps.gen.params.n_blob: unknown field; did you mean 'n_blobs'?" in line, line


@pytest.mark.parametrize("args,words", [
    (("task", "generate", "--executor", "slrum"), "did you mean 'slurm'?"),
    (("chek", "x.zarr"), "did you mean 'check'?"),
    (("submit", "wf.yaml", "--scheduler", "pbss"), "did you mean 'pbs'?"),
], ids=["executor-option", "command", "scheduler-option"])
def test_a_misspelt_choice_on_the_command_line_names_the_closest(cli, args, words):
    line = one_line(*cli(*args)[::2])
    assert "invalid choice" in line and words in line, line


@pytest.mark.parametrize("executor,top,words,closest", [
    ({"kind": "SLURM"}, {}, "executor.kind: Input should be", "slurm"),
    ({"kind": "slurm", "slurm": {"memroy": "2GB"}}, {}, "executor.slurm.memroy: 'memroy' is not a SLURMCluster setting",
     "memory"),
    ({"kind": "sge", "sge": {"resource_specs": "h_vmem=4G"}}, {}, "'resource_specs' is not a SGECluster setting",
     "resource_spec"),
    ({"kind": "sync", "worker_start_timout": 10}, {}, "executor.worker_start_timout: unknown field",
     "worker_start_timeout"),
    ({"kind": "sync"}, {"descripton": "x"}, "descripton: unknown field", "description"),
], ids=["kind", "slurm-setting", "sge-setting", "executor-key", "top-level-key"])
def test_misspelt_executor_kinds_settings_and_workflow_keys_name_the_closest(cli, tmp_path, executor, top, words,
                                                                            closest):
    wf = workflow(tmp_path / "wf.yaml", executor, **top)
    line = one_line(*cli("validate", wf)[::2])
    assert words in line and f"did you mean {closest!r}?" in line, line


def test_misspelt_step_names_name_the_closest(cli, tmp_path):
    steps = {"gen": {"task": "generate", "params": {"output": str(tmp_path / "a.zarr"), "shape": [4, 8, 8]}},
             "copy": {"task": "rechunk", "needs": ["gne"], "params": {"input": str(tmp_path / "a.zarr"),
                                                                      "output": str(tmp_path / "b.zarr")}}}
    wf = workflow(tmp_path / "wf.yaml", steps=steps)
    line = one_line(*cli("validate", wf)[::2])
    assert "no step named 'gne'; did you mean 'gen'?" in line, line
    steps["copy"]["needs"] = ["gen"]
    wf = workflow(tmp_path / "wf.yaml", steps=steps)
    line = one_line(*cli("run", wf, "--step", "cpy")[::2])
    assert "--step 'cpy'" in line and "did you mean 'copy'?" in line, line
    line = one_line(*cli("validate", wf, "--set", "steps.gne.params.seed=3")[::2])
    assert "--set steps.gne.params.seed" in line and "did you mean 'gen'?" in line, line
    assert not (tmp_path / "a.zarr").exists()


# -- 3. exit codes ----------------------------------------------------------------------------------
def test_check_of_a_missing_path_or_of_something_that_is_no_store_is_bad_input(cli, tmp_path):
    code, out, err = cli("check", tmp_path / "nothing.zarr")
    assert "does not exist" in one_line(code, err) and out == ""
    code, out, err = cli("check", "--json", tmp_path / "nothing.zarr")
    assert "does not exist" in one_line(code, err) and out == ""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("not a store")
    for path in (tmp_path / "notes", tmp_path / "notes" / "a.txt"):
        code, out, err = cli("check", path)
        assert "not a store" in one_line(code, err) and out == "", err


def test_check_of_a_store_with_problems_is_still_a_failed_check(cli, tmp_path):
    import zarr

    zarr.open_group(str(tmp_path / "bare.zarr"), mode="w")
    code, out, _ = cli("check", tmp_path / "bare.zarr")
    assert code == 1 and "no OME-NGFF metadata" in out


def test_help_and_version_return_their_exit_code(cli):
    assert cli("--help")[0] == 0 and cli("--version")[0] == 0 and cli("tasks", "--help")[0] == 0


# -- 4. sizes and run times, on every scheduler ----------------------------------------------------
SIZES = [  # (executor block, field named, bad value shown)
    ({"kind": "slurm", "slurm": {"memory": "lots"}}, "executor.slurm.memory", "'lots' is not a size"),
    ({"kind": "sge", "sge": {"memory": "lots"}}, "executor.sge.memory", "'lots' is not a size"),
    ({"kind": "pbs", "pbs": {"memory": "lots"}}, "executor.pbs.memory", "'lots' is not a size"),
    ({"kind": "lsf", "lsf": {"memory": "lots"}}, "executor.lsf.memory", "'lots' is not a size"),
    ({"kind": "htcondor", "htcondor": {"memory": "lots"}}, "executor.htcondor.memory", "'lots' is not a size"),
    ({"kind": "htcondor", "htcondor": {"disk": "big"}}, "executor.htcondor.disk", "'big' is not a size"),
    ({"kind": "slurm", "slurm": {"job_mem": "much"}}, "executor.slurm.job_mem", "'much' is not a size"),
    ({"kind": "lsf", "lsf": {"mem": "4GB"}}, "executor.lsf.mem", "'4GB' is not a number of bytes"),
    ({"kind": "slurm", "slurm": {"walltime": "2 hours"}}, "executor.slurm.walltime",
     "'2 hours' is not a walltime SLURM"),
    ({"kind": "sge", "sge": {"walltime": "1-00:00:00"}}, "executor.sge.walltime",
     "'1-00:00:00' is not a walltime Grid"),
    ({"kind": "pbs", "pbs": {"walltime": "soon"}}, "executor.pbs.walltime", "'soon' is not a walltime PBS"),
    ({"kind": "lsf", "lsf": {"walltime": "1-00:00"}}, "executor.lsf.walltime", "'1-00:00' is not a walltime LSF"),
    ({"kind": "slurm", "slurm": {"walltime": 86400}}, "executor.slurm.walltime", "86400 is a number"),
    ({"kind": "pbs", "pbs": {"death_timeout": "soon"}}, "executor.pbs.death_timeout", "'soon' is not a time"),
    ({"kind": "sge", "sge": {"cores": "many"}}, "executor.sge.cores", "'many' is not a whole number"),
    ({"kind": "local", "memory_limit": "lots"}, "executor.memory_limit", "'lots' is not a size"),
]


@pytest.mark.parametrize("executor,field,words", SIZES, ids=[f"{f}={w.split()[0]}" for _, f, w in SIZES])
@pytest.mark.parametrize("command", ["validate", "run --dry-run"])
def test_every_size_and_walltime_of_every_scheduler_is_one_line_at_validation(cli, tmp_path, executor, field,
                                                                                words, command):
    wf = workflow(tmp_path / "wf.yaml", executor)
    head, *rest = command.split()
    line = one_line(*cli(head, wf, *rest)[::2])
    assert f"{field}: {words}" in line and "e.g." in line, line
    assert not (tmp_path / "a.zarr").exists()


def test_an_unquoted_walltime_is_said_with_the_quoted_form(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: t\nexecutor:\n  kind: slurm\n  slurm: {walltime: 24:00:00}\nsteps:\n"
                  f"  gen: {{task: generate, params: {{output: {tmp_path / 'a.zarr'}, shape: [4, 8, 8]}}}}\n")
    line = one_line(*cli("validate", wf)[::2])
    assert "executor.slurm.walltime: 86400 is a number" in line and "walltime: '24:00:00'" in line, line


@pytest.mark.parametrize("kind,resources,words", [
    ("slurm", {"memory": "lots"}, "steps.gen.resources.memory: 'lots' is not a size"),
    ("pbs", {"walltime": "whenever"}, "steps.gen.resources.walltime: 'whenever' is not a walltime"),
    ("lsf", {"walltime": "2-00:00:00"}, "steps.gen.resources.walltime: '2-00:00:00' is not a walltime LSF takes"),
])
def test_a_step_resources_size_or_walltime_is_one_line(cli, tmp_path, kind, resources, words):
    steps = {"gen": {"task": "generate", "resources": resources,
                     "params": {"output": str(tmp_path / "a.zarr"), "shape": [4, 8, 8]}}}
    line = one_line(*cli("validate", workflow(tmp_path / "wf.yaml", {"kind": kind}, steps))[::2])
    assert words in line and "e.g." in line, line


def test_a_bad_size_in_dask_jobqueue_config_is_one_line_naming_where_it_is(cli, tmp_path):
    with jobqueue_config({"jobqueue.sge.memory": "lots"}):
        line = one_line(*cli("validate", workflow(tmp_path / "wf.yaml", {"kind": "sge"}))[::2])
        assert "jobqueue.sge.memory" in line and "DASK_JOBQUEUE__SGE__MEMORY" in line and "'lots'" in line, line
        assert cli("validate", workflow(tmp_path / "wf.yaml", {"kind": "sge", "sge": {"memory": "2GB"}}))[0] == 0


@pytest.mark.parametrize("task,sets,words", [
    ("rechunk", ["unit_mb=lots"], "params.unit_mb: Input should be a valid number"),
    ("generate", ["shape=[4,8,8]", "unit_mb=4GB"], "params.unit_mb: Input should be a valid number"),
])
def test_a_size_parameter_of_a_task_is_one_line_with_the_value_and_a_good_one(cli, tmp_path, task, sets, words):
    args = ["task", task, "--executor", "sync", "--set", f"output={tmp_path / 'o.zarr'}"]
    if task == "rechunk":
        args += ["--set", f"input={tmp_path / 'in.zarr'}"]
    for s in sets:
        args += ["--set", s]
    line = one_line(*cli(*args)[::2])
    bad = sets[-1].split("=", 1)[1]
    assert words in line and f"got {bad!r}" in line and "a number of megabytes, e.g." in line, line


@pytest.mark.parametrize("option,value,words", [("--mem", "lots", "--mem: 'lots' is not a size"),
                                                ("--time", "two hours", "--time: 'two hours' is not a walltime")])
def test_submit_checks_the_driver_job_memory_and_time(cli, tmp_path, option, value, words):
    wf = workflow(tmp_path / "wf.yaml", {"kind": "slurm"})
    line = one_line(*cli("submit", wf, "--print", option, value)[::2])
    assert words in line and "e.g." in line, line


# -- 5. what the help says ----------------------------------------------------------------------------
def test_the_help_names_every_scheduler_zarrmill_runs_on(cli):
    _, out, _ = cli("--help")
    flat = " ".join(out.split())
    assert "locally or on SLURM" not in flat
    for scheduler in ("SLURM", "Grid Engine", "PBS", "LSF", "HTCondor"):
        assert scheduler in flat, flat
    _, out, _ = cli("task", "--help")
    assert "run one task locally" not in " ".join(out.split())
