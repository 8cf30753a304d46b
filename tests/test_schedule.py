"""Scheduled conversions: for_each over acquisitions, readiness, run history, locks, provenance,
and the deploy/schedule examples' commands."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, forget_ownership

from zarrmill.runtime.core.locks import process_space
from zarrmill.io.ngff.conformance import check_store
from zarrmill.runtime.core.history import History
from zarrmill.runtime.core.provenance import read_provenance

WORKFLOW = REPO / "workflows" / "scheduled-cellvoyager.yaml"


def acquire(cli, folder: Path, seed: int, wells=("B03",)):
    code, _, err = cli("task", "generate-plate", "--executor", "sync", "--set", f"output={folder}",
                       "--set", f"wells={list(wells)}", "--set", "grid=[1,2]", "--set", "shape=[48,64]",
                       "--set", "channels=1", "--set", f"seed={seed}")
    assert code == 0, err
    # generate-plate keeps its ledger in the folder; an instrument would not
    forget_ownership(folder)


def sets(tmp_path: Path, quiet: int = 0) -> list[str]:
    return ["--set", f"vars.incoming={tmp_path / 'incoming'}", "--set", f"vars.out={tmp_path / 'out'}",
            "--set", "executor.kind=threads", "--set", f"for_each.ready.quiet_seconds={quiet}",
            "--set", "steps.reshard.params.overview_size=32", "--set", "steps.reshard.params.min_size=32",
            "--set", "steps.pyramid.params.min_size=32"]


def latest(tmp_path: Path) -> dict[str, str]:
    history = History(tmp_path / "out" / ".zarrmill-state")
    return {r.dataset: r.status for r in history.all()}


def done_count(tmp_path: Path, name: str) -> int:
    return sum(1 for r in History(tmp_path / "out" / ".zarrmill-state").all() if r.dataset == name and r.status == "done")


def test_converts_ready_datasets_then_only_the_one_that_completed(cli, tmp_path):
    """Also: datasets converted side by side leave dask's global config as it was (their steps
    once set and restored its scheduler option across threads, leaving 'dask.distributed' set, and
    every later dask compute in the process failed with 'no Client active')."""
    import dask.config

    scheduler = dask.config.get("scheduler", None)
    for i, name in enumerate(("plate1", "plate2", "plate3")):
        acquire(cli, tmp_path / "incoming" / name, seed=i)
    mlf = tmp_path / "incoming" / "plate3" / "MeasurementData.mlf"
    held = mlf.read_bytes()
    mlf.unlink()  # still being written: the instrument writes the mlf last
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 0, err
    assert "2 converted, 1 waiting" in out
    assert latest(tmp_path) == {"plate1": "done", "plate2": "done", "plate3": "waiting"}
    mlf.write_bytes(held)
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 0, err
    assert "1 converted, 2 up to date" in out
    assert [done_count(tmp_path, n) for n in ("plate1", "plate2", "plate3")] == [1, 1, 1]
    for name in ("plate1", "plate2", "plate3"):
        assert check_store(tmp_path / "out" / f"{name}.ome.zarr")[0] == []
        assert check_store(tmp_path / "out" / f"{name}-wells.ome.zarr")[0] == []
    code, out, _ = cli("runs", WORKFLOW, *sets(tmp_path)[:4])
    assert code == 0 and out.count(" done ") == 3
    assert dask.config.get("scheduler", None) == scheduler


def test_quiet_period_waits_for_recent_changes(cli, tmp_path):
    acquire(cli, tmp_path / "incoming" / "fresh", seed=1)
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path, quiet=3600))
    assert code == 0 and "[fresh] waiting: files changed" in out


def test_failed_dataset_recorded_does_not_block_others_and_retry_converts_it(cli, tmp_path):
    acquire(cli, tmp_path / "incoming" / "good", seed=1)
    acquire(cli, tmp_path / "incoming" / "bad", seed=2)
    tif = sorted((tmp_path / "incoming" / "bad").glob("*.tif"))[0]
    good_bytes = tif.read_bytes()
    tif.write_bytes(b"II*\x00corrupt")
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 1 and "1 datasets failed: bad" in err
    runs = {r.dataset: r for r in History(tmp_path / "out" / ".zarrmill-state").all()}
    assert runs["good"].status == "done" and runs["bad"].status == "failed"
    assert tif.name in runs["bad"].error and "cannot read image" in runs["bad"].error
    code, out, _ = cli("runs", WORKFLOW, "--failed", *sets(tmp_path)[:4])
    assert "bad" in out and "good" not in out
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))  # unchanged: not retried by itself
    assert "failed before with the same input" in out
    tif.write_bytes(good_bytes)
    os.utime(tif, (time.time() - 100, time.time() - 100))
    code, out, _ = cli("runs", WORKFLOW, "--retry", *sets(tmp_path)[:4])
    assert "re-queued 1 failed datasets: bad" in out
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 0, err
    assert latest(tmp_path)["bad"] == "done" and done_count(tmp_path, "good") == 1


def test_lock_left_by_a_killed_run_is_taken_over(cli, tmp_path):
    acquire(cli, tmp_path / "incoming" / "plate1", seed=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / "out" / ".zarrmill-state" / "locks" / "plate1.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"host": os.uname().nodename, "pid": dead.pid, "token": "x", "since": 0,
                                "space": process_space()}))
    code, out, err = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 0, err
    assert "taking over stale lock plate1.lock" in out
    assert latest(tmp_path)["plate1"] == "done" and not lock.exists()


def test_live_lock_is_respected(cli, tmp_path):
    acquire(cli, tmp_path / "incoming" / "plate1", seed=1)
    lock = tmp_path / "out" / ".zarrmill-state" / "locks" / "plate1.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"host": "another-host", "pid": 1, "token": "x", "since": time.time()}))
    code, out, _ = cli("run", WORKFLOW, *sets(tmp_path))
    assert code == 0 and "1 locked" in out and "held by another-host:1" in out


def test_provenance_in_every_output(cli, tmp_path):
    acquire(cli, tmp_path / "incoming" / "plate1", seed=1)
    t0 = time.time()
    assert cli("run", WORKFLOW, *sets(tmp_path))[0] == 0
    prov = read_provenance(tmp_path / "out" / "plate1.ome.zarr")
    import hashlib

    from zarrmill import __version__

    assert prov["zarrmill"] == __version__ and prov["host"] == os.uname().nodename
    assert prov["workflow"]["name"] == "scheduled-cellvoyager"
    assert prov["workflow"]["file"] == str(WORKFLOW)
    expected_hash = hashlib.sha256(WORKFLOW.read_bytes() + "\n".join(sets(tmp_path)[1::2]).encode()).hexdigest()[:16]
    assert prov["workflow"]["hash"] == expected_hash
    assert set(prov["steps"]) == {"ingest", "pyramid"}
    wells = read_provenance(tmp_path / "out" / "plate1-wells.ome.zarr")
    assert set(wells["steps"]) == {"reshard"} and wells["workflow"]["hash"] == expected_hash
    ingest = prov["steps"]["ingest"]
    assert ingest["task"] == "ingest" and ingest["params"]["input"] == str(tmp_path / "incoming" / "plate1")
    raw = [f for f in (tmp_path / "incoming" / "plate1").iterdir() if f.is_file()]
    assert ingest["inputs"][0]["bytes"] == sum(f.stat().st_size for f in raw)
    assert t0 <= ingest["started"] <= ingest["ended"] <= wells["steps"]["reshard"]["ended"] <= time.time()
    code, out, _ = cli("check", tmp_path / "out" / "plate1-wells.ome.zarr")
    assert code == 0 and "provenance: zarrmill" in out and "step reshard: task reshard" in out


def cron_command(line: str) -> str:
    fields = line.split(None, 5)
    assert len(fields) == 6 and all(re.fullmatch(r"[\d*/,-]+", f) for f in fields[:5]), line
    return fields[5]


def zarrmill_args(command: str, env: dict[str, str]) -> list[str]:
    """The arguments the example gives zarrmill, parsed as a shell would split them (no shell runs)."""
    words = [env.get(w[1:], w) if w.startswith("$") else w for w in shlex.split(command)]
    words = words[words.index("&&") + 1:] if "&&" in words else words
    words = words[:words.index(">>")] if ">>" in words else words
    assert words[0] == "/opt/zarrmill/.venv/bin/zarrmill", words
    return words[1:]


def check_example_command(cli, command: str, env: dict[str, str]) -> None:
    """Shell syntax (bash -n), then the workflow with the example's own --set values validates."""
    assert subprocess.run(["bash", "-n", "-c", command], capture_output=True).returncode == 0, command
    args = zarrmill_args(command, env)
    assert args[:2] == ["run", "/opt/zarrmill/workflows/scheduled-cellvoyager.yaml"], args
    code, out, err = cli("validate", WORKFLOW, *args[2:])
    assert code == 0 and "ingest (ingest), pyramid (pyramid), reshard (reshard)" in out, err


def test_deploy_schedule_examples_are_checked_not_run(cli, tmp_path):
    """The cron, scrontab and systemd examples are parsed and checked; nothing of them is executed
    (they name /opt and /data, which a test never hands to a run)."""
    cron = (REPO / "deploy" / "schedule" / "zarrmill.crontab").read_text()
    env = dict(line.split("=", 1) for line in cron.splitlines() if re.match(r"^[A-Z]+=", line))
    line = next(ln for ln in cron.splitlines() if ln and not ln.startswith("#") and "=" not in ln.split()[0])
    check_example_command(cli, cron_command(line), env)
    scron = (REPO / "deploy" / "schedule" / "zarrmill.scrontab").read_text()
    assert "#SCRON --time=" in scron
    sline = next(ln for ln in scron.splitlines() if ln and not ln.startswith("#"))
    check_example_command(cli, cron_command(sline), {})
    service = (REPO / "deploy" / "schedule" / "zarrmill-scheduled.service").read_text()
    timer = (REPO / "deploy" / "schedule" / "zarrmill-scheduled.timer").read_text()
    assert re.search(r"^OnCalendar=\*-\*-\* \*:07:00$", timer, re.M) and "Unit" in timer
    exec_start = re.search(r"^ExecStart=(.+)$", service, re.M).group(1)
    check_example_command(cli, exec_start, {})
    analyze = shutil.which("systemd-analyze")
    if analyze:  # the units' own syntax, with the program path pointed at one that exists here
        (tmp_path / "zarrmill-scheduled.service").write_text(
            service.replace("/opt/zarrmill/.venv/bin/zarrmill", "/bin/true"))
        (tmp_path / "zarrmill-scheduled.timer").write_text(timer)
        proc = subprocess.run([analyze, "verify", str(tmp_path / "zarrmill-scheduled.timer"),
                               str(tmp_path / "zarrmill-scheduled.service")], capture_output=True, text=True)
        assert proc.returncode == 0 and "Unknown key" not in proc.stderr, proc.stderr
        proc = subprocess.run([analyze, "calendar", "*-*-* *:07:00"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_validate_for_each_workflow_without_datasets(cli):
    code, out, err = cli("validate", WORKFLOW)
    assert code == 0, err
    assert "ingest (ingest), pyramid (pyramid), reshard (reshard)" in out


def test_the_submit_cron_example_has_a_checked_line_per_scheduler(cli, tmp_path, monkeypatch):
    """deploy/schedule/zarrmill-submit.crontab: one line per scheduler, each a valid cron line whose
    zarrmill arguments validate the workflow and print a driver job in that scheduler's syntax
    (nothing is submitted; --log-dir points into the test's own folder)."""
    cron = (REPO / "deploy" / "schedule" / "zarrmill-submit.crontab").read_text()
    env = dict(line.split("=", 1) for line in cron.splitlines() if re.match(r"^[A-Z]+=", line))
    lines = [ln for ln in cron.splitlines() if ln and not ln.startswith("#") and "=" not in ln.split()[0]]
    seen = {}
    monkeypatch.chdir(tmp_path)
    for line in lines:
        command = cron_command(line)
        assert subprocess.run(["bash", "-n", "-c", command], capture_output=True).returncode == 0, command
        args = zarrmill_args(command, env)
        assert args[:2] == ["submit", "/opt/zarrmill/workflows/scheduled-cellvoyager.yaml"], args
        kind = args[args.index("--scheduler") + 1]
        code, out, err = cli("submit", WORKFLOW, *args[2:], "--print", "--log-dir", str(tmp_path / "logs"))
        assert code == 0, err
        seen[kind] = out
    assert sorted(seen) == ["htcondor", "lsf", "pbs", "sge", "slurm"]
    assert "#SBATCH --time=02:00:00" in seen["slurm"] and "#$ -l h_rt=02:00:00" in seen["sge"]
    assert "#PBS -l walltime=02:00:00" in seen["pbs"] and "#BSUB -W 02:00" in seen["lsf"]
    assert "request_memory = 2G" in seen["htcondor"]
