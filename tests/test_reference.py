"""The reference is complete and its examples run: every task parameter has a description that says
the thing itself (no source path a pip user does not have), every task has an example its page
shows as a workflow file and a command line, and those examples run, in the order their ``after``
gives, in one folder. Also the project's files (LICENSE, CITATION.cff, CHANGELOG.md) and the one
version they share with the package, and PatchDataset's dtype default where the pages state it."""
from __future__ import annotations

import inspect
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import IN_CI, REPO

from zarrmill.runtime.front import manual
from zarrmill.runtime.execution.registry import get_task, task_names
from zarrmill.runtime.front.schema import workflow_schema

SOURCE_PATH = re.compile(r"tasks/|\.py\b")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def parameters() -> list[tuple[str, str, dict]]:
    """(task, parameter, its JSON schema) for every task parameter ``zarrmill schema`` lists."""
    defs = workflow_schema()["$defs"]
    out = []
    for key, step in defs.items():
        if key.startswith("Step_"):
            params = defs[step["properties"]["params"]["$ref"].split("/")[-1]]
            out += [(step["properties"]["task"]["const"], name, prop) for name, prop in params["properties"].items()]
    return out


# -- descriptions ---------------------------------------------------------------------------------------
def test_every_task_parameter_has_a_description():
    found = parameters()
    missing = [f"{task}.{name}" for task, name, prop in found if not prop.get("description", "").strip()]
    assert len(found) > 100 and not missing, f"parameters without a description: {missing}"


def test_no_description_or_task_page_points_at_a_source_file():
    """A pip user has no tasks/... file: a description says the thing itself."""
    named = [f"{task}.{name}: {prop['description']}" for task, name, prop in parameters()
             if SOURCE_PATH.search(prop.get("description", ""))]
    named += [f"{name} (its docstring, the page's text)" for name in task_names()
              if SOURCE_PATH.search(get_task(name).doc)]
    assert not named, named


# -- examples ---------------------------------------------------------------------------------------------
def test_every_task_has_an_example_that_validates_and_its_page_shows_it():
    pages = manual.reference_pages()
    for name in task_names():
        example = manual.task_example(name)
        assert example is not None, f"task {name}: its module has no EXAMPLE = {{'params': {{...}}}}"
        get_task(name).params_model.model_validate(example["params"])
        assert example.get("after") in (None, *task_names()), f"{name}: after names no task"
        page = pages[f"reference/tasks/{name}.md"]
        assert manual.example_workflow(name, example["params"]).rstrip() in page
        assert manual.example_command(name, example["params"]) in page
        # what --set reads back is what the example says
        words = shlex.split(manual.example_command(name, example["params"]))
        sets = dict(w.split("=", 1) for w in words[4::2])
        assert {k: yaml.safe_load(v) for k, v in sets.items()} == example["params"], name


def _in_order() -> list[str]:
    """Task names with each example after the one whose output it reads (ties in list order)."""
    done: list[str] = []
    pending = list(task_names())
    while pending:
        ready = [n for n in pending if manual.task_example(n).get("after") in (None, *done)]
        assert ready, f"examples whose 'after' never runs: {pending}"
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def test_every_example_runs_as_its_page_shows_it(tmp_path, monkeypatch):
    from zarrmill.runtime.execution.workflow import load_workflow

    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in _in_order():
        example = manual.task_example(name)
        params = example["params"]
        if example.get("sample") and not (tmp_path / example["sample"][1]).exists():  # once, as the page says
            made = subprocess.run(["zarrmill", "sample-data", *example["sample"]], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert made.returncode == 0, made.stderr
        workflow = tmp_path / f"{name}-example.yaml"
        workflow.write_text(manual.example_workflow(name, params))
        assert [s.task for s in load_workflow(workflow).steps] == [name]  # valid, its inputs there
        done = subprocess.run(manual.example_command(name, params), shell=True, cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{name}: {manual.example_command(name, params)}\n{done.stderr[-3000:]}"
    for made in ("raw", "plate.ome.zarr", "wells.ome.zarr", "organ/brain.ome.zarr/labels/cells", "brain-sharded.ome.zarr",
                 "cuboids.zarr", "brain-b2nd", "tune/recommended.yaml", "check"):
        assert (tmp_path / made).exists(), made


# -- the Python API pages -----------------------------------------------------------------------------
def test_the_python_api_pages_document_every_entry_from_its_docstring():
    pages = manual.api_pages()
    assert set(pages) == {"reference/api/training-data.md", "reference/api/task-contract.md"}
    for page in pages.values():
        assert "## " in page and "```python" in page
    contract = pages["reference/api/task-contract.md"]
    for name in ("TaskParams", "PlanContext", "Task", "EXAMPLE", "plan(params, ctx)"):
        assert name in contract, name
    training = pages["reference/api/training-data.md"]
    for name in ("PatchDataset", "open_patches", "points_table", "PatchArray"):
        assert f"## {name}" in training, name


def test_patch_dataset_dtype_default_is_what_the_pages_say():
    """The code's default (float32) is what the API page and every example's comment say."""
    from zarrmill.io.training.patch_dataset import PatchDataset

    default = inspect.signature(PatchDataset).parameters["dtype"].default
    assert default == "float32"
    assert "dtype: Any = 'float32'" in manual.api_pages()["reference/api/training-data.md"]
    assert "float32 unless" in inspect.getdoc(PatchDataset)
    wrong = []
    for page in sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            # a PatchDataset made with the default dtype, described as keeping the stored type
            if "PatchDataset(" in line and "dtype=" not in line.split("#")[0] and "as stored" in line:
                wrong.append(f"{page.relative_to(REPO)}:{n}: {line.strip()}")
    assert not wrong, f"PatchDataset's items are float32 by default (dtype=None keeps the stored type): {wrong}"


# -- the project's files ----------------------------------------------------------------------------------
def test_license_citation_and_changelog_are_there_with_the_packages_version():
    version = PYPROJECT["version"]
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("BSD 3-Clause License") and "the zarrmill developers" in license_text
    assert PYPROJECT["license"] == "BSD-3-Clause"

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "version", "date-released", "authors", "license"):
        assert cff.get(key), f"CITATION.cff lacks {key}"
    assert cff["cff-version"] == "1.2.0" and cff["title"] == "zarrmill"
    assert str(cff["version"]) == version and cff["license"] == PYPROJECT["license"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(cff["date-released"]))
    assert {"name": "The zarrmill developers"} in cff["authors"]

    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(version)}\] - {cff['date-released']}$", changelog, re.M), \
        f"CHANGELOG.md has no section for {version} released {cff['date-released']}"
    assert "### Upgrading from" in changelog


def test_the_installed_package_reports_the_version_pyproject_gives():
    """One source: pyproject's version, read back by importlib.metadata (``zarrmill --version``)."""
    from zarrmill import __version__

    version = PYPROJECT["version"]
    if __version__ != version and not IN_CI:  # an editable install made before the version changed
        pytest.skip(f"installed metadata says {__version__}, pyproject {version}: pip install -e . (tests/run does)")
    assert __version__ == version
    done = subprocess.run([sys.executable, "-m", "zarrmill", "--version"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == f"zarrmill {version}"
