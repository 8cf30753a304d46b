"""Every number a user can set has both bounds, stated in the one-line message (#27 item 4), and the
last crashes on small command-line mistakes are one clear line with exit 2 that writes nothing."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zarrmill.runtime.execution.registry import get_task, task_names
from zarrmill.runtime.execution.spec import WorkflowSpec


def unbounded(schema: dict[str, Any], defs: dict[str, Any], path: str) -> list[str]:
    """Paths of numeric fields in a JSON schema that miss a lower or an upper bound."""
    if "$ref" in schema:
        return unbounded(defs[schema["$ref"].split("/")[-1]], defs, path)
    out = []
    if schema.get("type") in ("integer", "number"):
        low = "minimum" in schema or "exclusiveMinimum" in schema
        high = "maximum" in schema or "exclusiveMaximum" in schema
        if not (low and high):
            out.append(path)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            out += unbounded(sub, defs, path)
    if isinstance(schema.get("items"), dict):
        out += unbounded(schema["items"], defs, path + "[]")
    for name, sub in schema.get("properties", {}).items():
        out += unbounded(sub, defs, f"{path}.{name}")
    return out


def test_every_numeric_parameter_of_every_task_and_workflow_has_both_bounds():
    missing = []
    for name in task_names():
        schema = get_task(name).params_model.model_json_schema()
        missing += unbounded(schema, schema.get("$defs", {}), name)
    schema = WorkflowSpec.model_json_schema()
    missing += unbounded(schema, schema.get("$defs", {}), "workflow")
    assert not missing, f"numeric parameters without both bounds: {missing}"


def test_the_walker_finds_an_unbounded_number():  # the test above cannot pass vacuously
    schema = {"properties": {"a": {"type": "number", "exclusiveMinimum": 0}, "b": {"type": "integer",
              "minimum": 0, "maximum": 3}, "c": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert unbounded(schema, {}, "t") == ["t.a", "t.c"]


@pytest.mark.parametrize("task, sets, says", [
    ("rechunk", ["unit_mb=1e308"], "unit_mb: Input should be less than or equal to 1048576"),
    ("ingest", ["plate_shape=[100000,100000]"], "plate_shape.0: Input should be less than or equal to 72"),
    ("generate", ["shape=[64,64]", "seed=-1"], "seed: Input should be greater than or equal to 0"),
    ("pyramid", ["z_factor=0"], "z_factor"),
    ("patch-extract", ["pad_value=1e300"], "pad_value: Input should be less than or equal to"),
])
def test_out_of_bounds_numbers_are_one_line_naming_the_bound(cli, tmp_path, task, sets, says):
    args = ["task", task, "--executor", "sync", "--set", f"input={tmp_path / 'in.zarr'}",
            "--set", f"output={tmp_path / 'out.zarr'}"]
    if task == "generate":
        args = args[:4] + args[6:]
    for s in sets:
        args += ["--set", s]
    before = sorted(tmp_path.rglob("*"))
    code, out, err = cli(*args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], err
    assert "please report" not in err and "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_workflow_file_is_named_empty(cli, tmp_path, text):
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    for command in ("run", "validate"):
        code, _, err = cli(command, wf)
        assert code == 2
        assert err.strip().splitlines() == [f"zarrmill: error: {wf}:1:1: the workflow file is empty; give it "
                                            "a name and steps (workflows/demo.yaml is an example)"]


@pytest.mark.parametrize("item", ["=3", ".a=1", "a..b=2"])
def test_a_set_without_a_key_names_the_set_argument(cli, tmp_path, item):
    code, _, err = cli("task", "generate", "--set", item, "--set", f"output={tmp_path / 'o'}")
    assert code == 2
    assert err.strip().splitlines() == [f"zarrmill: error: --set {item!r}: the key before '=' is empty or has "
                                        "an empty part; expected KEY=VALUE, e.g. --set executor.workers=4"]
    assert not (tmp_path / "o").exists()


def test_status_of_a_path_that_does_not_exist_says_so(cli, tmp_path):
    code, _, err = cli("status", tmp_path / "nope")
    assert code == 2
    assert err.strip() == f"zarrmill: error: {tmp_path / 'nope'}: does not exist; give an output zarrmill wrote"
    code, _, err = cli("status", tmp_path)  # an existing folder without a ledger keeps its own message
    assert code == 1 and "no zarrmill ledger here" in err


def test_an_empty_parameter_file_is_named_empty(cli, tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text("")
    code, _, err = cli("task", "generate", "--params", params)
    assert code == 2 and "the parameter file is empty" in err
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["p.yaml"]


@pytest.mark.parametrize("where", ["zarrmill.io.storage.atomic.os.fsync", "zarrmill.runtime.execution.step_run.fingerprint"])
def test_a_full_disk_names_the_output_it_was_writing(cli, tmp_path, monkeypatch, where):
    """ENOSPC from write() or fsync() carries no file name; the line names what was being written."""
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(where, full)
    out = tmp_path / "img.zarr"
    code, _, err = cli("task", "generate", "--executor", "sync", "--set", f"output={out}", "--set", "shape=[32,32]",
                       "--set", "axes=yx")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no space left on the device" in lines[0], err
    assert "?" not in lines[0] and out.name in lines[0], err  # the output, or its bookkeeping beside it
