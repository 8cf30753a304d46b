"""What a new user gets from a plain clone: the demo workflow ends in a plate that independent
readers open, and a plain (non-editable) install imports as ``zarrmill`` from any folder, even one
holding its own ``tasks.py`` and ``tasks/``."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import IN_CI, REPO, zarrmill_subprocess


def test_demo_workflow_ends_in_a_plate_readers_open(tmp_path):
    out = tmp_path / "demo"
    proc = zarrmill_subprocess("run", REPO / "workflows" / "demo.yaml", "--executor", "threads",
                               "--set", f"vars.out={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plate = out / "wells.ome.zarr"
    check = zarrmill_subprocess("check", plate, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr

    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    nodes = list(Reader(parse_url(str(plate)))())
    assert nodes, "ome-zarr-py's Reader found nothing"
    pixels = nodes[0].data[0]
    assert pixels.shape[-2] > 0 and pixels.shape[-1] > 0
    assert np.asarray(pixels[(0,) * (pixels.ndim - 2)]).any(), "plate pixels are all zero"

    import ngio

    container = ngio.open_ome_zarr_plate(str(plate), mode="r")
    assert sorted(container.wells_paths()) == ["B/03", "C/05"]
    assert sorted(container.images_paths()) == ["B/03/well", "C/05/well"]
    image = container.get_image("B", "03", "well").get_image()
    assert np.asarray(image.get_array()).any()


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _fresh_env(tmp_path: Path) -> Path:
    """A new venv that sees the dependencies already installed here (a .pth file naming this
    interpreter's site-packages, which only extends sys.path: the editable install of this
    checkout is not activated there) and gets zarrmill itself as a built wheel."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz-test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    wheel_dir, source = tmp_path / "wheel", tmp_path / "source"
    # built from a copy without build/ or *.egg-info: setuptools reuses an earlier build's files
    # there, so a package left out of pyproject's list would still be in the wheel
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv*", ".git", "build", "*.egg-info",
                                                                "__pycache__", "site"))
    build = subprocess.run([str(python), "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(wheel_dir), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    wheel = next(wheel_dir.glob("zarrmill-*.whl"))
    inst = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", "-q",
                           str(wheel)], capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr
    return python


@pytest.mark.timeout(300)
def test_plain_install_imports_as_zarrmill_beside_a_users_own_tasks(tmp_path):
    python = _fresh_env(tmp_path)
    with zipfile.ZipFile(next((tmp_path / "wheel").glob("*.whl"))) as wheel:
        top = {n.split("/")[0] for n in wheel.namelist()}
        packaged = {n.rsplit("/", 1)[0] for n in wheel.namelist() if n.endswith("/__init__.py")}
    assert "zarrmill" in top and "tasks" not in top, top
    folders = {("zarrmill" / f.parent.relative_to(REPO / "tasks")).as_posix()
               for f in (REPO / "tasks").rglob("__init__.py") if "__pycache__" not in f.parts}
    assert folders <= packaged, f"not in pyproject's packages: {sorted(folders - packaged)}"

    user = tmp_path / "user-project"
    (user / "tasks").mkdir(parents=True)
    (user / "tasks" / "__init__.py").write_text("raise ImportError('the user own tasks package')\n")
    (user / "tasks.py").write_text("raise ImportError('the user own tasks.py')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    code = ("from zarrmill.io.training.b2store import open_patches\n"
            "from zarrmill.io.training.patch_dataset import PatchDataset\n"
            "import zarrmill, pathlib\n"
            "assert 'site-packages' in zarrmill.__file__, zarrmill.__file__\n"
            "print('ok', zarrmill.__version__)\n")
    proc = subprocess.run([str(python), "-c", code], cwd=user, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith(f"ok {_project_version()}"), proc.stderr
    cli = subprocess.run([str(python), "-m", "zarrmill", "tasks"], cwd=user, capture_output=True,
                         text=True, env=env)
    assert cli.returncode == 0 and "ingest" in cli.stdout, cli.stderr
    script = python.parent / "zarrmill"
    piped = subprocess.run(f"'{script}' tasks ingest | head -1", shell=True, cwd=user,
                           capture_output=True, text=True, env=env)
    assert piped.returncode == 0 and piped.stdout.startswith("usage: zarrmill task ingest") and piped.stderr == "", piped.stderr


def test_nothing_in_the_repository_reads_outside_it():
    if not (REPO / ".git").exists():
        if IN_CI:
            pytest.fail("CI runs in a clone, but this is not a git checkout")
        pytest.skip("not a git checkout")
    outside = os.path.join(os.pardir, "shared")  # the reference folder beside a developer's checkout
    hits = subprocess.run(["git", "grep", "-n", "-I", "-F", "-e", outside], cwd=REPO, capture_output=True, text=True)
    assert hits.returncode == 1 and hits.stdout == "", hits.stdout  # 1: git grep found nothing


def _etc_and_packages() -> dict[str, tuple]:
    """Every entry under /etc (kind, size, mtime; links not followed) and the package database:
    read only, to see that the test command left them as they were (no run is given these paths)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, names in os.walk("/etc"):
        for name in dirnames + names:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[path] = (st.st_mode, st.st_size, st.st_mtime_ns)
    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    for top in ("/usr/local/bin", base_site):  # nothing installed into the system's or the base Python's
        for dirpath, dirnames, names in os.walk(top):
            for name in dirnames + names:
                st = os.lstat(os.path.join(dirpath, name))
                out[os.path.join(dirpath, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    for db in ("/var/lib/dpkg/status", "/var/lib/dpkg/available"):
        if os.path.exists(db):
            out[db] = (hashlib.sha256(Path(db).read_bytes()).hexdigest(),)
    return out


def _daemons() -> set[tuple[int, str]]:
    """(pid, name) of every process whose parent is init: where a started daemon ends up."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if rest[1] == "1" and rest[0] not in ("Z", "X"):
                out.add((int(entry), name))
    return out


@pytest.mark.timeout(900)
def test_tests_run_without_services_leaves_the_machine_alone(tmp_path):
    """The README's test command without --services, as on a fresh machine: it sets up the clone's
    venvs and runs pytest (here: collects one file), and /etc, the package database and the
    daemons running are as they were."""
    etc, daemons = _etc_and_packages(), _daemons()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_CURRENT_TEST")}
    env["PYTHON"] = sys.executable  # the same Python as ./.venv's: tests/run keeps the venvs
    run = subprocess.run(["bash", "tests/run", "-q", "-p", "no:cacheprovider", "--co", "tests/test_install.py"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=850)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "test_tests_run_without_services_leaves_the_machine_alone" in run.stdout
    after = _etc_and_packages()
    changed = sorted(k for k in etc.keys() | after.keys() if etc.get(k) != after.get(k))
    assert changed == [], changed[:20]
    started = _daemons() - daemons
    for _ in range(30):  # a killed run's workers of a test on the other pytest worker end within seconds
        started = {d for d in started if Path(f"/proc/{d[0]}").exists()}
        if not started:
            break
        time.sleep(0.5)
    assert started == set(), started  # a daemon tests/run started stays
    # no SLURM up (or none installed: a fresh machine, where scontrol itself is missing)
    slurm_up = shutil.which("scontrol") is not None and subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0
    if os.geteuid() == 0 and not slurm_up:
        assert "skipping what needs the machine's services" in run.stderr, run.stderr[-2000:]


def _fake_python(where: Path, version: str) -> Path:
    """An executable that answers the version probe as Python ``version`` would."""
    fake = where / f"python{version}"
    fake.write_text(f"#!/bin/sh\necho {version}\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("script", ["tests/run", "deploy/demo.sh"])
def test_the_setup_scripts_refuse_an_unsupported_python_before_making_anything(script, tmp_path):
    venv = REPO / ".venv"
    before = venv.stat().st_mtime_ns if venv.exists() else None
    env = {**os.environ, "PYTHON": str(_fake_python(tmp_path, "3.9"))}
    env.pop("CI", None)
    run = subprocess.run(["bash", str(REPO / script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == f"{script}: {env['PYTHON']} is Python 3.9; zarrmill supports 3.11 3.12 3.13 " \
                                 "(set PYTHON=python3.11, for example)"
    assert (venv.stat().st_mtime_ns if venv.exists() else None) == before


def test_a_venv_made_by_another_python_is_made_anew_before_it_is_used(tmp_path):
    """deploy/python-venv.sh (tests/run and deploy/demo.sh source it): a .venv whose Python is 3.9
    is replaced by one made by the Python asked for; one made by it is kept."""
    old = tmp_path / ".venv" / "bin"
    old.mkdir(parents=True)
    _fake_python(old, "3.9").rename(old / "python")
    script = f"WHO=test; source {REPO / 'deploy' / 'python-venv.sh'}; fresh_venv .venv; venv_ok .venv && echo kept"
    env = {**os.environ, "PYTHON": sys.executable}
    first = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "test: .venv was made by Python 3.9, not" in first.stderr and first.stdout.strip() == "kept"
    made = (tmp_path / ".venv" / "pyvenv.cfg").stat().st_mtime_ns
    again = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stderr == "" and again.stdout.strip() == "kept", again.stderr
    assert (tmp_path / ".venv" / "pyvenv.cfg").stat().st_mtime_ns == made
