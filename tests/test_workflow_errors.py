"""Bad input: one clear line naming file:line:col and the field, exit 2, nothing written."""
from pathlib import Path

import pytest

GOOD = """name: t
vars:
  out: {out}
executor: {{kind: sync}}
steps:
  gen:
    task: generate
    params:
      output: ${{out}}/a.ome.zarr
      shape: [8, 32, 32]
      n_blobs: 3
  copy:
    task: rechunk
    needs: [gen]
    params:
      input: ${{out}}/a.ome.zarr
      output: ${{out}}/b.ome.zarr
"""


def run_bad(cli, tmp_path: Path, text: str, *extra: str) -> str:
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    code, out, err = cli("validate", wf, *extra)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert not (tmp_path / "out").exists(), "validation must write nothing"
    return lines[0]


@pytest.fixture
def good(tmp_path: Path) -> str:
    return GOOD.format(out=tmp_path / "out")


def test_good_workflow_validates(cli, tmp_path, good):
    (tmp_path / "wf.yaml").write_text(good)
    code, out, err = cli("validate", tmp_path / "wf.yaml")
    assert code == 0 and "gen (generate), copy (rechunk)" in out


def test_yaml_syntax_error(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("shape: [8, 32, 32]", "shape: [8, 32, 32"))
    assert "wf.yaml:" in line and "YAML syntax error" in line


def test_unknown_task(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("task: rechunk", "task: rechunkk"))
    assert "wf.yaml:13:" in line and "unknown task 'rechunkk'" in line and "rechunk" in line


def test_unknown_parameter_lists_allowed(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("n_blobs: 3", "n_blob: 3"))
    assert "wf.yaml:11:7" in line and "steps.gen.params.n_blob" in line
    assert "allowed:" in line and "n_blobs" in line


def test_mistyped_parameter(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("n_blobs: 3", "n_blobs: many"))
    assert "wf.yaml:11:" in line and "steps.gen.params.n_blobs" in line and "integer" in line


def test_missing_needs_target(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("needs: [gen]", "needs: [gne]"))
    assert "wf.yaml:14:" in line and "no step named 'gne'" in line


def test_dependency_cycle(cli, tmp_path, good):
    text = good.replace("    task: generate\n", "    task: generate\n    needs: [copy]\n")
    line = run_bad(cli, tmp_path, text)
    assert "dependency cycle" in line and "gen" in line and "copy" in line


def test_missing_input_path(cli, tmp_path, good):
    text = good.replace("    needs: [gen]\n", "").replace("input: ${out}/a.ome.zarr", "input: /nonexistent/x.zarr")
    line = run_bad(cli, tmp_path, text)
    assert "wf.yaml:15:" in line and "/nonexistent/x.zarr does not exist" in line


def test_unresolved_variable(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("${out}/b.ome.zarr", "${outdir}/b.ome.zarr"))
    assert "wf.yaml:17:" in line and "unresolved variable ${outdir}" in line


def test_env_variable_and_set_override(cli, tmp_path, good, monkeypatch):
    monkeypatch.setenv("ZM_TEST_OUT", str(tmp_path / "envout"))
    wf = tmp_path / "wf.yaml"
    wf.write_text(good.replace("out: " + str(tmp_path / "out"), "out: ${env:ZM_TEST_OUT}"))
    from zarrmill.runtime.execution.workflow import load_workflow

    loaded = load_workflow(wf, ["steps.gen.params.n_blobs=7", "executor.kind=threads"])
    assert loaded.step("gen").params.output == str(tmp_path / "envout" / "a.ome.zarr")
    assert loaded.step("gen").params.n_blobs == 7 and loaded.executor.kind == "threads"


def test_bad_executor_kind(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("{kind: sync}", "{kind: torque}"))
    assert "executor.kind" in line and "'slurm'" in line and "'pbs'" in line


def test_run_with_bad_workflow_writes_nothing(cli, tmp_path, good):
    wf = tmp_path / "wf.yaml"
    wf.write_text(good.replace("n_blobs: 3", "n_blobs: -1"))
    code, _, err = cli("run", wf)
    assert code == 2 and "greater than or equal to 0" in err
    assert not (tmp_path / "out").exists()


def test_misspelled_step_key_lists_the_step_fields(cli, tmp_path, good):
    line = run_bad(cli, tmp_path, good.replace("    needs: [gen]", "    need: [gen]"))
    assert "steps.copy.need: unknown field; did you mean 'needs'? allowed: task, params, needs, resources" in line


@pytest.mark.parametrize("content,words", [
    (b"name: x\nsteps: {}\nname: y\n", ["wf.yaml:3", "'name' appears twice", "lines 1 and 3"]),
    (b"a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
     ["alias bomb"]),
    (b"name: caf\xe9\n", ["not UTF-8", "byte 9"]),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", ["binary file"]),
], ids=["duplicate-key", "alias-bomb", "latin-1", "binary"])
def test_hostile_yaml_is_one_clear_line(cli, tmp_path, content, words):
    wf = tmp_path / "wf.yaml"
    wf.write_bytes(content)
    code, _, err = cli("validate", wf)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_a_typo_in_executor_slurm_fails_validate_with_a_suggestion(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: x\nexecutor:\n  kind: slurm\n  slurm: {queu: debug, memory: 1GB}\n"
                  "steps:\n  a: {task: generate, params: {output: out.zarr, shape: [4, 8, 8]}}\n")
    code, _, err = cli("validate", wf)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "wf.yaml:4:" in err and "'queu'" in err and "did you mean 'queue'" in err


def test_validate_lists_every_problem_and_run_says_one_line(cli, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: x\nexecutor: {kind: sync}\nsteps:\n"
                  "  a: {task: generate, params: {output: o.zarr, shape: [4, 8, 8], sheep: 1, seed: x}}\n"
                  "  b: {task: rechunk, params: {output: o2.zarr}}\n"
                  "  c: {task: nope}\n")
    code, _, err = cli("validate", wf)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 4, err
    # a misspelt key first (it may be why another value is wrong), then the bad value
    assert ["wf.yaml:4:" in lines[0] and "sheep" in lines[0], "seed" in lines[1], "steps.b.params.input" in lines[2],
            "unknown task 'nope'" in lines[3]] == [True] * 4
    code, _, err = cli("run", wf)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "+3 more problems" in err


@pytest.mark.parametrize("task,sets,field", [
    ("generate", ["output=o.zarr", "shape=[4,0,8]"], "shape.1"),
    ("generate", ["output=o.zarr", "shape=[4,8,8]", "chunks=[1,-4,8]"], "chunks.1"),
    ("rechunk", ["input=i.zarr", "output=o.zarr", "chunks=[0,4,4]"], "chunks.0"),
    ("rechunk", ["input=i.zarr", "output=o.zarr", "unit_mb=.inf"], "unit_mb"),
    ("generate", ["output=o.zarr", "shape=[4,8,8]", "pixel_size=[1,.nan,1]"], "pixel_size"),
    ("generate-plate", ["output=o", "grid=[0,2]"], "grid.0"),
    ("patch-extract", ["input=i.zarr", "output=o.zarr", "points=p.csv", "cuboid=[2,-1,4]"], "cuboid.1"),
    ("compress", ["input=i.npy", "output=o", "patch=[0,16,16]"], "patch.0"),
    ("generate", ["output=o.zarr", "shape=[4,8,8]", "pixel_size=[0,1,1]"], "pixel_size.0"),
    ("patch-extract", ["input=i.zarr", "output=o.zarr", "points=p.csv", "cuboid=[2,4,4]",
                       "network_voxel_size=[1,-1,1]"], "network_voxel_size.1"),
], ids=["shape-0", "chunks-negative", "rechunk-chunks-0", "inf", "nan", "grid-0", "cuboid-negative", "patch-0",
        "pixel-size-0", "voxel-size-negative"])
def test_bad_sizes_are_one_line_naming_the_field(cli, tmp_path, task, sets, field):
    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"params.{field}" in err, err


def test_two_steps_writing_one_output_is_an_error_naming_both(cli, tmp_path, good):
    text = good + """  again:
    task: generate
    params:
      output: ${out}/a.ome.zarr
      shape: [8, 32, 32]
"""
    line = run_bad(cli, tmp_path, text)
    assert "steps gen and again both write" in line and "wf.yaml:" in line, line


@pytest.mark.parametrize("executor,words", [
    ("{kind: local, workers: 100000}", "at most"),
    ("{kind: threads, threads_per_worker: 100000}", "at most"),
    ("{kind: local, memory_limit: lots}", "'lots' is not a size"),
    ("{kind: local, memory_limit: 0B}", "more than 0 bytes"),
])
def test_executor_sizes_beyond_this_machine_are_one_line(cli, tmp_path, good, executor, words):
    line = run_bad(cli, tmp_path, good.replace("executor: {kind: sync}", f"executor: {executor}"))
    assert words in line and "executor" in line, line


@pytest.mark.parametrize("memory,words", [("lots", "'lots' is not a size"), ("0GB", "more than 0 bytes")])
def test_a_step_memory_that_is_not_a_size_is_one_line(cli, tmp_path, good, memory, words):
    line = run_bad(cli, tmp_path, good.replace("    task: generate\n", f"    task: generate\n    resources: {{memory: {memory}}}\n"))
    assert words in line and "steps.gen.resources.memory" in line and "wf.yaml:" in line, line


def test_usage_errors_are_one_line_in_a_real_process(tmp_path):
    from conftest import zarrmill_subprocess

    for args, words in ((["runs", "--prune", "--days", "-1"], "days must be a number >= 0"),
                        (["run"], "required: workflow"), (["nosuch"], "invalid choice")):
        proc = zarrmill_subprocess(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr


def test_a_level_the_image_lacks_is_an_error_not_another_level(cli, tmp_path):
    image = tmp_path / "img.zarr"
    assert cli("task", "generate", "--executor", "sync", "--set", f"output={image}", "--set", "shape=[8,32,32]")[0] == 0
    for task, sets in (("compress", ["output=o", "patch=[4,8,8]", "level=2"]),
                       ("patch-extract", ["output=p.zarr", "mode=random", "cuboid=[2,4,4]", "level=1"])):
        args = ["task", task, "--executor", "sync", "--set", f"input={image}"]
        for s in sets:
            args += ["--set", s.replace("output=", f"output={tmp_path}/")]
        code, _, err = cli(*args)
        assert code == 2 and "has levels 0..0, not level" in err, err


def test_a_plan_of_too_many_units_is_refused_at_once(cli, tmp_path):
    code, _, err = cli("task", "generate", "--executor", "sync", "--set", f"output={tmp_path / 'huge.zarr'}",
                       "--set", "shape=[100000,100000,100000]")
    assert code == 2 and "units of work; one step plans at most" in err, err
    assert not (tmp_path / "huge.zarr").exists()
