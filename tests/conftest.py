"""Shared fixtures: byte-level store digests, the CLI in-process, and a real single-node SLURM."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zarrmill.io.storage.guard import bookkeeping_dir, is_bookkeeping_name

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # every file a test reads lives in the repository
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(module: str, why: str):
    """Import an optional dependency a test needs: skipped where it is missing on a laptop, a
    failure under CI (one rule for what CI is: IN_CI), so a missing install never hides tests."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if IN_CI:
            pytest.fail(f"{module} is missing under CI ({why}); tests/run installs it", pytrace=False)
        pytest.skip(f"{module} is not installed ({why})", allow_module_level=True)


def bookkeeping(store: Path) -> Path:
    """Where zarrmill keeps a store's owner marker, locks and ledger: beside it."""
    return bookkeeping_dir(store)


def done_units(store, step: str) -> int:
    """Units of ``step`` the ledger beside ``store`` records as done (0 before any record)."""
    from zarrmill.runtime.core.ledger import Ledger

    try:
        return len(Ledger(store, step).done_ids())
    except OSError:
        return 0


def forget_ownership(store: Path) -> None:
    """Make a zarrmill output look like another tool's: its bookkeeping beside it is gone."""
    shutil.rmtree(bookkeeping(store))


def tree_digest(root: Path, skip_ledger: bool = True) -> dict[str, str]:
    """relative path -> sha256 of every file under root (the ledger dir excluded). The provenance
    record (times, host) is the one thing allowed to differ between runs, so it is left out."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or (skip_ledger and any(is_bookkeeping_name(p) for p in rel.parts)) \
                or path.name == "zarrmill-provenance.json" or rel.parts[-2:] == ("zarrmill", "provenance.json"):
            continue
        data = path.read_bytes()
        if path.name in ("zarr.json", ".zattrs"):
            data = _without_provenance(data)
        out[str(rel)] = hashlib.sha256(data).hexdigest()
    return out


def _without_provenance(data: bytes) -> bytes:
    doc = json.loads(data)
    attrs = doc.get("attributes", doc) if "zarr_format" in doc and "attributes" in doc else doc
    ours = attrs.get("zarrmill")
    if isinstance(ours, dict) and "provenance" in ours:
        ours.pop("provenance")
        if not ours:
            attrs.pop("zarrmill")
    return json.dumps(doc, sort_keys=True).encode()  # always canonical, so both sides compare alike


@pytest.fixture(scope="session", autouse=True)
def runs_dir(tmp_path_factory) -> Path:
    """Run folders and crash logs of the suite stay in pytest's temporary folder, not the user's
    ~/.local/state (a test that needs another place sets ZARRMILL_RUNS_DIR itself)."""
    path = tmp_path_factory.mktemp("zarrmill-runs")
    old = os.environ.get("ZARRMILL_RUNS_DIR")
    os.environ["ZARRMILL_RUNS_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("ZARRMILL_RUNS_DIR", None)
    else:
        os.environ["ZARRMILL_RUNS_DIR"] = old


@pytest.fixture
def cli(capsys):
    """Run ``zarrmill ARGS`` in-process: returns (exit code, stdout, stderr)."""
    from zarrmill.runtime.front.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def zarrmill_subprocess(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zarrmill", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="session")
def slurm() -> str:
    """A running single-node SLURM; partition name. Tests never start it (that installs packages and
    writes /etc/slurm): tests/run --services and .ci/run do, before pytest. Under CI a missing SLURM fails the
    run; elsewhere the SLURM tests skip."""
    def up() -> bool:
        return shutil.which("sbatch") is not None and subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP") > 0

    if not up():
        if IN_CI:
            pytest.fail("SLURM is not running; .ci/run must start it (deploy/slurm-local/start-slurm.sh)")
        pytest.skip("no SLURM here (run deploy/slurm-local/start-slurm.sh as root)")
    return os.environ.get("SLURM_LOCAL_PARTITION", "debug")


@pytest.fixture(scope="session")
def sge() -> str:
    """A running one-node Grid Engine; queue name. Tests never start it: tests/run --services does, as root
    (deploy/sge-local/start-sge.sh). Under CI a missing Grid Engine fails the run; elsewhere the
    Grid Engine tests skip."""
    os.environ.setdefault("SGE_ROOT", "/var/lib/gridengine")
    os.environ.setdefault("SGE_CELL", "default")
    up = shutil.which("qsub") is not None and subprocess.run(
        ["qstat", "-f"], capture_output=True, text=True).stdout.count("all.q@") > 0
    if not up:
        if IN_CI:
            pytest.fail("Grid Engine is not running; `bash tests/run --services` starts it (deploy/sge-local/start-sge.sh)")
        pytest.skip("no Grid Engine here (run deploy/sge-local/start-sge.sh as root)")
    return "all.q"


def qstat_jobs() -> list[tuple[str, str, str]]:
    """(job id, full name, state) of every Grid Engine job (plain qstat cuts names at 10 characters)."""
    import xml.etree.ElementTree as ET

    out = subprocess.run(["qstat", "-u", "*", "-xml"], capture_output=True, text=True).stdout
    try:
        root = ET.fromstring(out)
    except ET.ParseError:
        return []
    return [(j.findtext("JB_job_number", ""), j.findtext("JB_name", ""), j.findtext("state", ""))
            for j in root.iter("job_list")]


def qstat_names() -> list[str]:
    return [name for _, name, _ in qstat_jobs()]


def squeue_names() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%j %T"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


# -- a real S3 server (moto's, its own process on 127.0.0.1; tests/s3_server.py) -----------------
@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    from s3_server import MOTO, S3Server

    if not MOTO.exists():
        if IN_CI:
            pytest.fail(f"{MOTO} missing: tests/run makes .venv-moto (moto[server])")
        pytest.skip(f"no moto venv at {MOTO} (bash tests/run makes it)")
    server = S3Server().start(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def s3env(s3, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "FSSPEC_S3_ANON"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    from zarrmill.io.storage.location import reset_clients

    reset_clients()  # clients made by an earlier test (another endpoint: a proxy) are not reused
    return s3


_BUCKETS = iter(range(10_000))


@pytest.fixture
def bucket(s3env) -> str:
    return s3env.make_bucket(f"zm-{os.getpid()}-{next(_BUCKETS)}")


# -- a second node's view of a folder, and a drive without hard links (FUSE, as root) -----------
def _fuse_tools(*names: str) -> None:
    """bindfs, fusefat and mkfs.vfat from Debian (tests/run installs them as root); under CI a
    missing one fails the run, elsewhere the test skips."""
    missing = [n for n in names if shutil.which(n) is None]
    why = f"{', '.join(missing)} not installed" if missing else "FUSE mounts need root" if os.geteuid() else ""
    if why:
        if IN_CI:
            pytest.fail(f"{why}; `bash tests/run --services` installs bindfs, fusefat and dosfstools as root", pytrace=False)
        pytest.skip(why)


def _unmount(point: Path) -> None:
    for cmd in (["fusermount", "-u", str(point)], ["umount", str(point)], ["umount", "-l", str(point)]):
        if shutil.which(cmd[0]) and subprocess.run(cmd, capture_output=True).returncode == 0:
            return


def _wait_mounted(point: Path) -> None:
    import time

    deadline = time.monotonic() + 10
    while not os.path.ismount(point):
        if time.monotonic() > deadline:
            pytest.fail(f"{point} did not get mounted")
        time.sleep(0.05)


@pytest.fixture
def second_mount(tmp_path):
    """(folder, the same folder seen through a second mount): bindfs, like a second NFS client,
    reports another device number; only folders inside pytest's temporary folder are mounted."""
    _fuse_tools("bindfs")
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    node_a.mkdir()
    node_b.mkdir()
    subprocess.run(["bindfs", "--no-allow-other", str(node_a), str(node_b)], check=True, capture_output=True)
    _wait_mounted(node_b)
    try:
        yield node_a, node_b
    finally:
        _unmount(node_b)


@pytest.fixture
def fat_drive(tmp_path):
    """A FAT file system (no hard links, no symlinks) mounted through fusefat from an image made
    by mkfs.vfat, inside pytest's temporary folder."""
    _fuse_tools("fusefat", "mkfs.vfat")
    image, point = tmp_path / "fat.img", tmp_path / "fat"
    point.mkdir()
    subprocess.run(["mkfs.vfat", "-C", str(image), "131072"], check=True, capture_output=True)
    subprocess.run(["fusefat", "-o", "rw+", str(image), str(point)], check=True, capture_output=True)
    _wait_mounted(point)
    try:
        yield point
    finally:
        _unmount(point)


_SESSION_START = time.monotonic()


def pytest_collection_modifyitems(config, items):
    """Under ``-n 2 --dist loadgroup`` (.ci/run), the tests of one real scheduler run one after
    another on one worker: they share its slots and watch its queue by job name. Everything else
    spreads over the workers."""
    for item in items:
        for service in ("slurm", "sge"):
            if service in getattr(item, "fixturenames", ()) or item.get_closest_marker(service):
                item.add_marker(pytest.mark.xdist_group(service))


def pytest_sessionfinish(session, exitstatus):
    """Under CI, a run of the whole suite that took longer than tests/ci-budget.json allows fails:
    the suite's time is held to a budget, so CI stays well inside its limit."""
    opt = session.config.option
    whole = not (opt.keyword or opt.markexpr) and [Path(a).resolve() for a in session.config.args] in (
        [REPO / "tests"], [REPO])
    if not IN_CI or not whole or session.testsfailed or exitstatus != 0:
        return
    budget = json.loads((REPO / "tests" / "ci-budget.json").read_text())["suite_seconds"]
    took = time.monotonic() - _SESSION_START
    if took > budget:
        session.config.get_terminal_writer().line(
            f"tests/conftest.py: the whole suite took {took:.0f} s, over its budget of {budget} s "
            "(tests/ci-budget.json): make slow cases smaller or move them to tests/bench/", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
