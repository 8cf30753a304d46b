"""Crash safety at any instant: a workflow (ingest -> pyramid -> reshard) killed with SIGKILL of its
whole process group (as an OOM killer or a walltime does) at moments defined by the progress the
run itself records (each step planning, its first unit, half its units, all its units, done), each
followed by a plain rerun without --overwrite, ends with every file identical to an uninterrupted
run, provenance listing every step, and exit 0. Moments come from the ledger, not from wall-clock
guesses, so a slow or a fast machine kills at the same places."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import bookkeeping, done_units, tree_digest

from zarrmill.runtime.core.provenance import read_provenance

STEPS = (("ingest", "plate.zarr"), ("pyramid", "plate.zarr"), ("reshard", "wells.zarr"))
FRACTIONS = ("planning", 1, 0.5, 1.0, "done")  # where in each step: a state, or units done (count or share)
LOCAL_FRACTIONS = (1, 0.5)


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


def _progress(out: Path, step: str, store: str) -> tuple[str | None, int]:
    """(state, units done) of a step, from its ledger beside the store."""
    folder = bookkeeping(out / store) / "steps" / step
    try:
        state = json.loads((folder / "step.json").read_text()).get("state")
    except (OSError, ValueError):
        return None, 0
    return state, done_units(out / store, step)


def _reached(out: Path, step: str, store: str, where, n_units: int) -> bool:
    state, done = _progress(out, step, store)
    if where in ("planning", "done"):
        return state == where or (where == "planning" and state is not None)
    need = where if isinstance(where, int) else max(1, int(where * n_units))
    return done >= need


def _run(wf: Path, cwd: Path, out: Path | None = None, moment: tuple | None = None) -> tuple[int, str]:
    """Run the workflow; with ``moment`` (step, store, where, units) SIGKILL its process group as
    soon as its ledger shows that progress (polled every 2 ms)."""
    proc = subprocess.Popen([sys.executable, "-m", "zarrmill", "run", str(wf)], cwd=cwd, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if moment is not None:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if _reached(out, *moment):
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


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
    code, err = _run(wf, tmp_path)
    assert code == 0, err
    reference = _state(out)
    assert reference[1] == {"plate.zarr": ["ingest", "pyramid"], "wells.zarr": ["reshard"]}
    units = {step: _progress(out, step, store)[1] for step, store in STEPS}
    assert all(n >= 2 for n in units.values()), units  # half-way is a moment of its own

    # every moment under threads; under local (worker processes) the moments where its own code
    # runs (units being written and marked done): planning and finishing are the driver's, the same
    # code under both, and the full matrix there took 5 of CI's minutes per Python
    fractions = FRACTIONS if executor == "threads" else LOCAL_FRACTIONS
    moments = [(step, store, where, units[step]) for step, store in STEPS for where in fractions]
    killed = 0
    for moment in moments:
        shutil.rmtree(out)  # the stores and their bookkeeping beside them
        code, _ = _run(wf, tmp_path, out, moment)
        killed += code == -signal.SIGKILL
        code, err = _run(wf, tmp_path)
        assert code == 0, f"killed at {moment[:3]}: rerun failed: {err}"
        assert _state(out) == reference, f"killed at {moment[:3]}: differs from an uninterrupted run"
    # the last moment of a step can come after its last write; most kills land mid-way
    late = len(STEPS) if "done" in fractions else 0  # the last moment of a step may come after its last write
    assert killed >= len(moments) - late, f"only {killed} of {len(moments)} kills landed before the run ended"


KILL_IN_CLAIM = """
import os, sys
from zarrmill.io.storage import disk_backend
from zarrmill.runtime.front.cli import main

real_write = disk_backend._write_synced

def write_then_die(out, data, path, durable=True, undo=None):
    real_write(out, data, path, durable, undo)
    if str(path).endswith(".zarrmill-claim"):  # the claim's temp file is written, not yet renamed
        os.kill(os.getpid(), 9)

disk_backend._write_synced = write_then_die
main(sys.argv[1:])
"""


def test_a_kill_while_the_claim_goes_in_reruns_to_the_same_store(tmp_path):
    """SIGKILL between the claim's temp file and its rename (the window a kill at the start of a
    step hit in CI): the rerun takes the store as new, removes that temp file (it carries the id of
    the owner marker beside it) and ends with the store an uninterrupted run makes."""
    args = ["task", "generate", "--set", "shape=[4,64,64]", "--set", "axes=zyx", "--executor", "sync"]
    out, clean = tmp_path / "killed" / "img.zarr", tmp_path / "clean" / "img.zarr"
    killed = subprocess.run([sys.executable, "-c", KILL_IN_CLAIM, *args, "--set", f"output={out}"],
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 1 and left[0].startswith(".zarrmill-claim.") and left[0].endswith(".partial"), left
    # a link of that form (someone's, to a file carrying the marker's id) is content: the store is
    # refused, the link and its file left as they are
    theirs, link = tmp_path / "theirs.json", out / (".zarrmill-claim." + "1" * 32 + ".partial")
    theirs.write_text((out / left[0]).read_text())
    link.symlink_to(theirs)
    refused = subprocess.run([sys.executable, "-m", "zarrmill", *args, "--set", f"output={out}"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "was not created by zarrmill" in refused.stderr, refused.stderr
    assert link.is_symlink() and theirs.read_text() == (out / left[0]).read_text()
    link.unlink()
    # a neighbour's file of the same form, not carrying the marker's id, is never removed
    (out / (".zarrmill-claim." + "0" * 32 + ".partial")).write_text('{"id": "someone else"}')
    rerun = subprocess.run([sys.executable, "-m", "zarrmill", *args, "--set", f"output={out}"],
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert [p.name for p in out.iterdir() if p.name.endswith(".partial")] == [".zarrmill-claim." + "0" * 32 + ".partial"]
    (out / (".zarrmill-claim." + "0" * 32 + ".partial")).unlink()
    assert subprocess.run([sys.executable, "-m", "zarrmill", *args, "--set", f"output={clean}"],
                          capture_output=True).returncode == 0
    assert tree_digest(out) == tree_digest(clean)
