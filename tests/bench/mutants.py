"""A scripted mutation run over zarrmill's core computations: each mutant changes one line of
downsampling, FOV placement, a reader's index mapping, the output guard or the ledger; the tests
that cover that module run against it; a mutant is killed when they fail.

  python tests/bench/mutants.py [--only NAME ...]

Runs in a scratch copy of the checkout (the working tree is never edited) and prints, per module,
mutants killed / survived, and each survivor. Results with the command: docs/performance.md, "Mutation run"."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOWNSAMPLE = ["tests/test_downsample.py", "tests/test_param_effects.py", "tests/test_labels.py"]
PLACEMENT = ["tests/test_reshard.py", "tests/test_ingest_wells.py"]
CELLVOYAGER = ["tests/test_cellvoyager.py", "tests/test_reader_contract.py"]
GUARD = ["tests/test_adversarial.py", "tests/test_bookkeeping.py", "tests/test_fov_table.py"]
LEDGER = ["tests/test_ledger.py", "tests/test_engine.py"]

# (name, file, original text, mutated text, tests)
MUTANTS = [
    ("mode ties pick the largest", "tasks/io/storage/downsample.py",
     "return candidates.min(axis=0)", "return np.where(counts == best, values, 0).max(axis=0)", DOWNSAMPLE),
    ("mode is nearest", "tasks/io/storage/downsample.py",
     "        return _mode(x, factors)", "        return np.ascontiguousarray(x[tuple(slice(None, None, f) for f in factors)])",
     DOWNSAMPLE),
    ("nearest takes the second pixel", "tasks/io/storage/downsample.py",
     "return np.ascontiguousarray(x[tuple(slice(None, None, f) for f in factors)])",
     "return np.ascontiguousarray(x[tuple(slice(min(1, f - 1), None, f) for f in factors)])", DOWNSAMPLE),
    ("mean ignores partial edge blocks", "tasks/io/storage/downsample.py",
     "    if all(n % f == 0 for n, f in zip(shape, factors)):", "    if True:", DOWNSAMPLE),
    ("mean truncates instead of rounding", "tasks/io/storage/downsample.py",
     "return np.rint(acc, out=acc).astype(x.dtype)", "return acc.astype(x.dtype)", DOWNSAMPLE),
    ("placement floors", "tasks/io/ngff/placement.py",
     "px = tuple(int(round((f.origin_um[a] - origin[a]) / scale[a])) for a in range(len(scale)))",
     "px = tuple(int((f.origin_um[a] - origin[a]) / scale[a]) for a in range(len(scale)))", PLACEMENT),
    ("placement swaps y and x", "tasks/io/ngff/placement.py",
     "px = tuple(int(round((f.origin_um[a] - origin[a]) / scale[a])) for a in range(len(scale)))",
     "px = tuple(int(round((f.origin_um[a] - origin[a]) / scale[a])) for a in range(len(scale)))[::-1]", PLACEMENT),
    ("cellvoyager row and column swapped", "tasks/io/readers/yokogawa.py",
     '"row": _int(el, "Row", path, 1), "col": _int(el, "Column", path, 1),',
     '"row": _int(el, "Column", path, 1), "col": _int(el, "Row", path, 1),', CELLVOYAGER),
    ("cellvoyager field off by one", "tasks/io/readers/yokogawa.py",
     '"field": _int(el, "FieldIndex", path, 1),', '"field": _int(el, "FieldIndex", path, 1) + 1,', CELLVOYAGER),
    ("guard lets anything be replaced", "tasks/io/storage/guard.py",
     "        if self.owned():\n            return True\n        rel =", "        if True:\n            return True\n        rel =",
     GUARD),
    ("guard ignores links out of the store", "tasks/io/storage/guard.py",
     "if not is_within(real(path), real(self.root)) or path == self.root and self.in_place:",
     "if path == self.root and self.in_place:", GUARD),
    ("ownership ignores the folder identity", "tasks/io/storage/guard.py",
     'if doc.get("folder") != [st.st_dev, st.st_ino]:', "if False:", GUARD),
    ("ownership ignores the seal", "tasks/io/storage/guard.py",
     'return not doc.get("sealed") or provenance_owner(self.root) == doc.get("id")', "return True", GUARD),
    ("ledger keeps a torn last line", "tasks/runtime/core/ledger.py",
     "            lines = lines[:-1]  # torn last line from a crash", "            pass", LEDGER),
    ("ledger forgets done units", "tasks/runtime/core/ledger.py",
     '        return {line.decode() for line in lines if line}', "        return set()", LEDGER),
]


def run_mutant(work: Path, name: str, rel: str, old: str, new: str, tests: list[str]) -> tuple[bool, float]:
    target = work / rel
    original = target.read_text()
    if old and original.count(old) != 1:
        raise SystemExit(f"mutant {name!r}: the original text is not found once in {rel}")
    target.write_text(original.replace(old, new) if old else original)
    env = dict(os.environ, PYTHONPATH=f"{work}{os.pathsep}{work / 'tests'}", PYTHONDONTWRITEBYTECODE="1")
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=work, env=env, capture_output=True, text=True)
    finally:
        target.write_text(original)
    return proc.returncode != 0, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, help="mutant names to run (default: all)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zm-mutants-")) / "zarrmill"
    shutil.copytree(REPO, work, ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__"))
    # the installed package is an editable install of REPO/tasks: point it at the copy
    (work / "sitecustomize.py").write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('zarrmill', {str(work / 'tasks' / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(work / 'tasks')!r}])\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['zarrmill'] = module; spec.loader.exec_module(module)\n")
    probe = subprocess.run([sys.executable, "-c", "import zarrmill.io.storage.downsample as m; print(m.__file__)"],
                           env=dict(os.environ, PYTHONPATH=str(work)), capture_output=True, text=True)
    if not probe.stdout.startswith(str(work)):
        raise SystemExit(f"the copy is not what imports as zarrmill: {probe.stdout or probe.stderr}")
    for tests in {tuple(m[4]) for m in MUTANTS}:  # unmutated, every test group must pass
        failed, _ = run_mutant(work, "baseline", "tasks/__init__.py", "", "", list(tests))
        if failed:
            raise SystemExit(f"the tests {list(tests)} fail without a mutant; fix them first")
    results: dict[str, list[tuple[str, bool]]] = {}
    for name, rel, old, new, tests in MUTANTS:
        if args.only and name not in args.only:
            continue
        killed, secs = run_mutant(work, name, rel, old, new, tests)
        print(f"{'killed  ' if killed else 'SURVIVED'} {rel}: {name} ({secs:.0f} s)", flush=True)
        results.setdefault(rel, []).append((name, killed))
    print("\nmodule | killed | survived")
    for rel, rows in results.items():
        print(f"{rel} | {sum(k for _, k in rows)} | {sum(not k for _, k in rows)}")
    shutil.rmtree(work.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
