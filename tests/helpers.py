"""Small builders of workflow files used across tests."""
from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import yaml


def jobqueue_config(values: dict) -> AbstractContextManager:
    """``dask.config.set`` of ``jobqueue.*`` keys, with dask-jobqueue imported first. dask-jobqueue
    adds its defaults under ``jobqueue`` when it is first imported; a set that finds no ``jobqueue``
    key creates it and deletes the whole key on exit, taking those defaults with it if the import
    happened inside, and every later cluster in that process fails with KeyError: 'jobqueue'."""
    import dask.config
    import dask_jobqueue  # noqa: F401

    return dask.config.set(values)


def write_workflow(path: Path, steps: dict, executor: dict | None = None, name: str = "t",
                   vars: dict | None = None) -> Path:
    doc = {"name": name, "executor": executor or {"kind": "sync"}, "steps": steps}
    if vars:
        doc["vars"] = vars
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def generate_step(output: Path, shape=(2, 16, 96, 80), chunks=(1, 8, 32, 32), unit_mb=0.05, **extra) -> dict:
    params = {"output": str(output), "shape": list(shape), "axes": "czyx"[-len(shape):],
              "chunks": list(chunks), "n_blobs": 30, "unit_mb": unit_mb, "pixel_size": [2.0, 0.5, 0.5]}
    params.update(extra)
    return {"task": "generate", "params": params}


def rechunk_step(src: Path, dst: Path, needs=("gen",), **extra) -> dict:
    params = {"input": str(src), "output": str(dst), "chunks": [1, 4, 16, 16],
              "shards": [1, 8, 32, 32], "unit_mb": 0.02}
    params.update(extra)
    return {"task": "rechunk", "needs": list(needs), "params": params}


def run_task(cli, task: str, *sets: str) -> tuple[int, str]:
    """``zarrmill task TASK --executor sync --set ...`` in-process: (exit code, stderr)."""
    args = ["task", task, "--executor", "sync"]
    for s in sets:
        args += ["--set", s]
    code, _, err = cli(*args)
    return code, err
