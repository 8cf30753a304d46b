"""The house's rules that a reader of the code relies on (docs/development.md, "The house"):
imports only go down the layers; a batch scheduler lives in one module of ``runtime/execution/schedulers/``
(adding one touches that file only; nothing else names one), checked on a copy of the package with
a scheduler added as one new file; a kind of storage is one module of ``io/storage/kinds/`` (a copy
of the package reads file:// URLs once one file declares them); nothing outside io/storage asks
whether a location is remote."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import zarrmill
from zarrmill.runtime.execution.schedulers import SCHEDULERS

PACKAGE = Path(zarrmill.__file__).resolve().parent
SCHEDULERS_DIR = PACKAGE / "runtime" / "execution" / "schedulers"


# bottom to top: a module imports from its own layer or those below, never from one above
LAYERS = [
    ("errors", ["errors", "secret_text"]),
    ("storage", ["io.storage"]),
    ("formats", ["io.ngff", "io.training"]),
    ("readers", ["io.readers"]),
    ("synthetic data", ["io.synthetic"]),
    ("runtime core", ["runtime.core"]),  # the task contract, units, budget, ledger, locks, provenance
    ("tasks", ["*"]),  # the task modules: every top-level module of the package
    ("runtime execution", ["runtime", "runtime.execution"]),  # engine, executors, schedulers, workflows
    ("runtime front", ["runtime.front", "__main__"]),  # command line, commands, check, manual
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            hit = prefix == "*" and "." not in module or module == prefix or module.startswith(prefix + ".")
            if hit and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    assert best is not None, module
    return best


def _imports(path: Path) -> list[tuple[str, int]]:
    """Modules of the package ``path`` imports (at the top or inside functions), with line numbers."""
    module, out = _module(path), []
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] + ([node.module] if node.module else [])
                target = ".".join(base)
            elif (node.module or "").startswith("zarrmill."):
                target = node.module[len("zarrmill."):]
            else:
                continue
            names = [f"{target}.{a.name}" if target else a.name for a in node.names]
            out += [(n if (PACKAGE / n.replace(".", "/")).with_suffix(".py").exists()
                     or (PACKAGE / n.replace(".", "/")).is_dir() else target, node.lineno) for n in names]
    return [(t, line) for t, line in out if t]


def test_imports_only_go_down_the_layers():
    upward = []
    for path in _sources_outside(PACKAGE / "nonexistent"):
        mine = _layer(_module(path))
        for target, line in _imports(path):
            if _layer(target) > mine:
                upward.append(f"{path.relative_to(PACKAGE)}:{line}: {LAYERS[mine][0]} imports {target} "
                              f"({LAYERS[_layer(target)][0]})")
    assert not upward, "\n".join(upward)


def test_only_io_storage_asks_whether_a_location_is_remote():
    found = [f"{f.relative_to(PACKAGE)}:{i}" for f in _sources_outside(PACKAGE / "io" / "storage")
             for i, line in enumerate(f.read_text().splitlines(), 1) if "is_remote" in line]
    assert not found, found


def _sources_outside(folder: Path) -> list[Path]:
    return [f for f in PACKAGE.rglob("*.py") if folder not in f.parents and "__pycache__" not in f.parts]


def test_only_the_schedulers_package_names_a_scheduler():
    names = {s.kind for s in SCHEDULERS.values()} | {s.label for s in SCHEDULERS.values()}
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names)) + r")\b", re.IGNORECASE)
    found = [f"{f.relative_to(PACKAGE)}:{i}: {line.strip()}" for f in _sources_outside(SCHEDULERS_DIR)
             for i, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "\n".join(found)


OAR = '''"""OAR through dask-jobqueue's OARCluster: the one file that adds it."""
from .base import Scheduler


class OAR(Scheduler):
    kind, label = "oar", "OAR"
    cluster_class, job_module, job_class = "OARCluster", "dask_jobqueue.oar", "OARJob"
    submit_command, cancel_command = "oarsub", "oardel"
    rank = 6
    settings_help = "oar: OARCluster settings (queue, project, cores, memory, walltime, ...)"
    directive, job_id_token = "#OAR", "%jobid%"

    def driver_directives(self, job_name: str, log: str, time: str, mem: str) -> list[str]:
        return [f"-n {job_name}", f"-O {log}", f"-l walltime={time}"]


SCHEDULER = OAR()
'''


def test_a_scheduler_is_added_by_one_module(tmp_path):
    copy = tmp_path / "lib" / "zarrmill"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "runtime" / "execution" / "schedulers" / "oar.py").write_text(OAR)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib"), "PYTHONSAFEPATH": "1"}

    def zarrmill_(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "zarrmill", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path)

    def workflow(settings: str) -> Path:
        path = tmp_path / "wf.yaml"
        path.write_text(f"""name: oar-run
executor: {{kind: oar, oar: {settings}}}
steps:
  check: {{task: cluster-check, params: {{output: {tmp_path / 'check'}, units: 2}}}}
""")
        return path

    where = subprocess.run([sys.executable, "-c", "import zarrmill; print(zarrmill.__file__)"], capture_output=True,
                           text=True, env=env)
    assert where.stdout.strip() == str(copy / "__init__.py")  # the copy, not the installed package
    assert "oar" in zarrmill_("submit", "--help").stdout  # the command line offers it
    ok = zarrmill_("validate", workflow("{queue: default, walltime: '01:00:00'}"))
    assert ok.returncode == 0, ok.stderr  # the workflow file takes its settings block
    typo = zarrmill_("validate", workflow("{queu: default}"))
    assert typo.returncode == 2 and "did you mean 'queue'" in typo.stderr, typo.stderr
    script = zarrmill_("submit", str(workflow("{queue: default}")), "--print", "--time", "02:00:00")
    assert script.returncode == 0, script.stderr  # the workflow's scheduler is the driver's
    assert "#OAR -l walltime=02:00:00" in script.stdout


FILE_URL = '''"""file:// URLs of this machine's files, read only: the one file that adds them."""
from pathlib import Path

from .base import DISK, StorageKind


class FileUrl(StorageKind):
    name, schemes, traits, rank, shown = "file URL", ("file",), DISK, 30, "file:///path"

    def local_path(self, text: str) -> Path:
        return Path("/" + text.split("://", 1)[1].lstrip("/"))  # file:///data/img.zarr is /data/img.zarr

    def zarr_path(self, scheme: str, rest: str) -> str:
        return str(self.local_path(f"{scheme}://{rest}"))


KIND = FileUrl()
'''


def test_a_storage_kind_is_added_by_one_module(tmp_path):
    """A read-only kind (file:// URLs) added as one file in io/storage/kinds/: the tasks read it with
    the same pixels, the URL checks offer it and refuse it as an output in one line, and the output
    guard sees through it: an output that is the input by its file:// URL is refused, --overwrite
    or not, and the input is left as it was."""
    import numpy as np
    import zarr

    copy = tmp_path / "lib" / "zarrmill"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib"), "PYTHONSAFEPATH": "1"}

    def task(name: str, *sets: str) -> subprocess.CompletedProcess:
        args = [a for s in sets for a in ((s,) if s.startswith("--") else ("--set", s))]
        return subprocess.run([sys.executable, "-m", "zarrmill", "task", name, "--executor", "sync", *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path)

    img = tmp_path / "img.zarr"
    made = task("generate", f"output={img}", "shape=[2,16,64,64]", "axes=czyx", "chunks=[1,8,32,32]")
    assert made.returncode == 0, made.stderr
    before = task("rechunk", f"input=file://{img}", f"output={tmp_path / 'copy.zarr'}", "chunks=[1,4,16,16]")
    assert before.returncode == 2 and "does not serve" in before.stderr, before.stderr  # not yet a kind
    (copy / "io" / "storage" / "kinds" / "file_url.py").write_text(FILE_URL)
    read = task("rechunk", f"input=file://{img}", f"output={tmp_path / 'copy.zarr'}", "chunks=[1,4,16,16]")
    assert read.returncode == 0, read.stderr
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "copy.zarr" / "0"))[:],
                                  zarr.open_array(str(img / "0"))[:])
    written = task("rechunk", f"input={img}", f"output=file://{tmp_path / 'out.zarr'}", "chunks=[1,4,16,16]")
    assert written.returncode == 2 and "which zarrmill only reads" in written.stderr, written.stderr
    assert not (tmp_path / "out.zarr").exists()
    before = _tree(img)
    same = task("rechunk", f"input=file://{img}", f"output={img}", "chunks=[1,4,16,16]", "--overwrite")
    assert same.returncode == 2 and "the output is the input" in same.stderr, same.stderr
    assert _tree(img) == before
    other = task("rechunk", f"input=gs://b/{img.name}", f"output={tmp_path / 'x.zarr'}")
    assert other.returncode == 2 and "and reads https:// and file:///path" in other.stderr, other.stderr


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


def test_a_kind_that_would_take_over_another_kinds_paths_is_refused_at_import():
    """A second kind of local paths or of s3://, a kind declared in part, or a local kind without a
    local path would silently change where zarrmill writes or what its guard compares: refused."""
    import pytest

    from zarrmill.io.storage.kinds import KINDS, by_scheme
    from zarrmill.io.storage.kinds.base import DISK, SERVER, StorageKind

    def kind(name: str, schemes: tuple[str, ...], traits=SERVER, **declared: str) -> StorageKind:
        return type(name, (StorageKind,), {"name": name, "schemes": schemes, "traits": traits, **declared})()

    assert {s for s in by_scheme(KINDS)} == {None, "s3", "https", "http"}
    cases = {"local paths": kind("zip", ()), "s3": kind("mirror", ("s3",)),
             "some of place": kind("half", ("gs",), place=".place_bucket:BucketPlace"),
             "no local_path": kind("nfs", ("nfs",), traits=DISK)}
    for why, wrong in cases.items():
        with pytest.raises(ImportError, match=why):
            by_scheme([*KINDS, wrong])
