"""The CLI as a user calls it."""
import json
from pathlib import Path

import jsonschema
import yaml
from conftest import REPO, zarrmill_subprocess
from helpers import generate_step, write_workflow


def test_tasks_lists_and_shows_parameters(cli):
    code, out, _ = cli("tasks")
    assert code == 0 and "rechunk" in out and "generate" in out
    code, out, _ = cli("tasks", "rechunk")
    assert code == 0 and "shards" in out and "required" in out
    code, _, err = cli("tasks", "nope")
    assert code == 2 and "unknown task 'nope'" in err


def test_schema_validates_the_shipped_workflows_and_rejects_bad_ones(cli):
    code, out, _ = cli("schema")
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    for wf in sorted((REPO / "workflows").glob("*.yaml")):
        doc = yaml.safe_load(wf.read_text())
        if "for_each" not in doc:
            jsonschema.validate(doc, schema)
    bad = yaml.safe_load((REPO / "workflows" / "demo.yaml").read_text())
    bad["steps"]["ingest"]["params"]["shardz"] = [1]
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(bad)), "unknown parameter must fail the generated schema"


def test_status_reports_done_and_missing(cli, tmp_path):
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")})
    assert cli("run", wf)[0] == 0
    code, out, _ = cli("status", tmp_path / "a.zarr")
    assert code == 0 and "gen" in out and "done" in out
    code, _, err = cli("status", tmp_path)
    assert code == 1 and "no zarrmill ledger" in err


def test_task_command_runs_one_task_with_params_file(cli, tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"output": str(tmp_path / "b.zarr"), "shape": [4, 32, 32]}))
    code, _, err = cli("task", "generate", "--params", params, "--set", "n_blobs=2", "--executor", "sync")
    assert code == 0, err
    assert (tmp_path / "b.zarr" / "0" / "zarr.json").exists()
    params.write_text(yaml.safe_dump({"output": str(tmp_path / "c.zarr"), "shape": [4, 32, 32], "sheep": 1}))
    code, _, err = cli("task", "generate", "--params", params)
    assert code == 2 and "p.yaml:" in err and "sheep" in err


def test_errors_are_one_line_without_debug_and_traceback_with_it(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: x\nsteps: {a: {task: nope}}\n")
    plain = zarrmill_subprocess("validate", wf)
    assert plain.returncode == 2 and len(plain.stderr.strip().splitlines()) == 1
    debug = zarrmill_subprocess("--debug", "validate", wf)
    assert "Traceback" in debug.stderr


def test_cluster_check_on_an_existing_scheduler_address(cli, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster:
        code, out, err = cli("task", "cluster-check", "--set", f"output={tmp_path / 'chk'}",
                             "--set", "units=12", "--set", "busy_ms=5", "--executor", "address",
                             "--set", "x=1")
        assert code == 2 and "x" in err  # unknown parameter caught before any work
        wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
            "output": str(tmp_path / "chk"), "units": 12, "busy_ms": 5}}},
            executor={"kind": "address", "address": cluster.scheduler_address})
        code, out, err = cli("run", wf)
    assert code == 0, err
    assert "12 units ran in: local: 12" in out
    assert len(list((tmp_path / "chk" / "units").glob("*.json"))) == 12


def test_task_help_is_plain_text_with_allowed_values_bounds_and_defaults(cli):
    code, out, _ = cli("tasks", "patch-extract")
    assert code == 0 and "``" not in out
    assert "mode: one of points, random, grid; default \"points\"" in out
    assert "cuboid: list of whole number >= 1 and <= 2147483647, 2 to 3 entries (or null)" in out
    code, out, _ = cli("tasks", "rechunk")
    assert "unit_mb: number > 0 and <= 1048576.0; default 64" in out and "clevel (whole number >= 0 and <= 9)" in out
    code, out, _ = cli("schema")
    schema = json.loads(out)
    assert schema["$id"].startswith("urn:zarrmill:workflow-schema:")


def test_run_folders_live_in_one_place_and_prune_removes_only_old_marked_ones(cli, tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setenv("ZARRMILL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    wf = write_workflow(tmp_path / "wf.yaml", {"gen": generate_step(tmp_path / "a.zarr")},
                        executor={"kind": "local", "workers": 1})
    assert cli("run", wf)[0] == 0
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("t-") and (made[0] / ".zarrmill-run").exists()
    assert not (tmp_path / "zarrmill-runs").exists(), "nothing piles up in the current folder"
    mine = tmp_path / "runs" / "not-zarrmills"
    mine.mkdir()
    old = time.time() - 30 * 86400
    for path in [made[0], *made[0].rglob("*"), mine]:
        os.utime(path, (old, old), follow_symlinks=False)
    code, out, _ = cli("runs", "--prune", "--days", "7")
    assert code == 0 and "removed 1 run folders" in out
    assert not made[0].exists() and mine.exists()


def test_a_new_run_folder_prunes_old_ones_by_default(tmp_path, monkeypatch):
    """Run folders (logs, TLS files of old runs) no longer pile up until ``runs --prune``: making one
    removes zarrmill's folders unused for 14 days, and beyond the newest 50 those unused for a day;
    a folder zarrmill did not mark is never touched."""
    import os
    import time

    from zarrmill.runtime.core.rundirs import KEEP_NEWEST, make_run_dir

    runs = tmp_path / "runs"
    monkeypatch.setenv("ZARRMILL_RUNS_DIR", str(runs))
    monkeypatch.delenv("ZARRMILL_RUNS_KEEP_DAYS", raising=False)

    def folder(name: str, days_ago: float, marked: bool = True):
        path = runs / name
        path.mkdir(parents=True)
        (path / "logs.txt").write_text("x")
        if marked:
            (path / ".zarrmill-run").touch()
        when = time.time() - days_ago * 86400
        for item in [path, *path.rglob("*")]:
            os.utime(item, (when, when), follow_symlinks=False)
        return path

    old, recent, foreign = folder("old", 20), folder("recent", 1.5), folder("foreign", 60, marked=False)
    days_old = [folder(f"day-{i:03d}", 2 + i / 1000) for i in range(KEEP_NEWEST)]
    make_run_dir(runs / "new")
    assert not old.exists() and foreign.exists() and (runs / "new").exists()
    kept = [p for p in [recent, *days_old] if p.exists()]
    assert recent in kept and len(kept) == KEEP_NEWEST and not days_old[-1].exists(), "the newest 50 are kept"


def test_a_local_worker_over_its_memory_limit_is_named_in_the_failure(cli, tmp_path):
    """dask's nanny restarts a local worker that outgrows executor.memory_limit (its unit held more
    than it declared, so the budget let it start): the failure line
    says the worker ran out of memory and which setting to raise, not only KilledWorker."""
    import dask.config
    import distributed  # noqa: F401 - its defaults must be in dask's config before config.set saves it

    wf = write_workflow(tmp_path / "wf.yaml", {"chk": {"task": "cluster-check", "params": {
        "output": str(tmp_path / "chk"), "units": 1, "busy_ms": 5000, "hold_mb": 600, "declare_mb": 50}}},
        executor={"kind": "local", "workers": 1, "memory_limit": "300MB", "retries": 0})
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        code, _, err = cli("run", wf)
    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err, err
    assert "ran out of memory" in lines[-1] and "raise executor.memory_limit" in lines[-1], lines[-1]
    assert "KilledWorker: the worker running it died" in lines[-1], "not distributed's paragraph of advice"


def test_an_unexpected_error_is_one_line_and_its_traceback_is_kept(cli, tmp_path, monkeypatch, runs_dir):
    from zarrmill.runtime.front import commands

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setitem(commands.COMMANDS, "tasks", broken)
    code, out, err = cli("tasks")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    log = Path(err.split("traceback: ")[1].split(";")[0])
    assert log.is_file() and log.is_relative_to(runs_dir) and "KeyError: 'boom'" in log.read_text()


def test_a_chunk_a_unit_cannot_decode_is_one_line_naming_the_array(cli, tmp_path):
    """A damaged chunk file in an input: the failure names the array it belongs to and what to do,
    not only the codec's "error during blosc decompression"."""
    src = tmp_path / "img.zarr"
    assert cli("task", "generate", "--executor", "sync", "--set", f"output={src}", "--set", "shape=[2,16,64,64]",
               "--set", "axes=czyx", "--set", "chunks=[1,8,32,32]")[0] == 0
    chunk = next(p for p in sorted((src / "0").rglob("*")) if p.is_file() and "c" in p.relative_to(src / "0").parts)
    chunk.write_bytes(b"not a blosc frame at all")
    code, _, err = cli("task", "rechunk", "--executor", "sync", "--set", f"input={src}", "--set",
                       f"output={tmp_path / 'out.zarr'}", "--set", "chunks=[1,4,16,16]")
    line = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err
    assert "img.zarr/0: a chunk of this array cannot be decoded" in line and "damaged" in line, line


def test_a_value_with_a_newline_is_echoed_escaped_in_the_one_line(cli, tmp_path):
    code, _, err = cli("check", tmp_path / "no\nthere.zarr")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "no\\nthere.zarr: does not exist" in lines[0], lines
