"""Crash safety at any instant: a workflow (ingest -> pyramid -> reshard) killed with SIGKILL of its
whole process group (as an OOM killer or a walltime does) at 20 moments spread over its run, each
followed by a plain rerun without --overwrite, ends with every file identical to an uninterrupted
run, provenance listing every step, and exit 0."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import tree_digest

from zarrmill.runtime.provenance import read_provenance

MOMENTS = 20


def _workflow(path: Path, raw: Path, out: Path, executor: str) -> Path:
    doc = {"name": "kill", "executor": {"kind": executor, **({"workers": 2} if executor == "local" else {})},
           "steps": {
               "ingest": {"task": "ingest", "params": {"input": str(raw), "output": str(out / "plate.zarr")}},
               "pyramid": {"task": "pyramid", "needs": ["ingest"],
                           "params": {"input": str(out / "plate.zarr"), "min_size": 32}},
               "reshard": {"task": "reshard", "needs": ["pyramid"],
                           "params": {"input": str(out / "plate.zarr"), "output": str(out / "wells.zarr"),
                                      "min_size": 32, "overview": True, "overview_size": 32}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(wf: Path, cwd: Path, kill_after: float | None = None) -> tuple[int, float, str]:
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "run", str(wf)], cwd=cwd, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, time.monotonic() - t0, err


def _state(out: Path) -> tuple[dict, dict]:
    digest = {name: tree_digest(out / name) for name in ("plate.zarr", "wells.zarr")}
    steps = {name: sorted((read_provenance(out / name) or {}).get("steps", {})) for name in ("plate.zarr", "wells.zarr")}
    return digest, steps


@pytest.mark.timeout(900)
@pytest.mark.parametrize("executor", ["threads", "local"])
def test_sigkill_at_any_moment_then_plain_rerun_is_identical(cli, tmp_path, executor):
    raw = tmp_path / "raw"
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={raw}",
                       "--set", "wells=[B03,C04]", "--set", "grid=[2,2]", "--set", "shape=[96,128]",
                       "--set", "channels=2", "--set", "z_planes=2")
    assert code == 0, err
    # every run writes to the same folder: metadata that names the source plate's path compares alike
    out = tmp_path / "out"
    wf = _workflow(tmp_path / "wf.yaml", raw, out, executor)
    code, seconds, err = _run(wf, tmp_path)
    assert code == 0, err
    reference = _state(out)
    assert reference[1] == {"plate.zarr": ["ingest", "pyramid"], "wells.zarr": ["reshard"]}

    killed_mid_way = 0
    for i in range(MOMENTS):
        shutil.rmtree(out)
        moment = seconds * (i + 0.5) / MOMENTS
        code, _, _ = _run(wf, tmp_path, kill_after=moment)
        killed_mid_way += code == -signal.SIGKILL and (out / "plate.zarr").exists()
        code, _, err = _run(wf, tmp_path)
        assert code == 0, f"moment {i} ({moment:.2f}s): rerun failed: {err}"
        assert _state(out) == reference, f"moment {i} ({moment:.2f}s): differs from an uninterrupted run"
    assert killed_mid_way >= MOMENTS // 2, f"only {killed_mid_way} kills landed while the workflow was writing"
