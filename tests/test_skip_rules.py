"""One rule for optional dependencies: skipped where one is missing on a laptop, a failure under CI
(#29 item 2), so a run that lacks an install never ends green with tests quietly gone."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import REPO


def run_module(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    test = tmp_path / "test_needs_missing.py"
    test.write_text(textwrap.dedent("""
        from conftest import require
        require("zarrmill_no_such_module", "a dependency this machine lacks")

        def test_never_runs():
            pass
    """))
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # the suite's own CI flag decides nothing here
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO / "tests"))
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:napari",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(test)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def test_a_missing_optional_dependency_skips_on_a_laptop(tmp_path):
    proc = run_module(tmp_path, None)
    assert proc.returncode in (0, 5) and "1 skipped" in proc.stdout, proc.stdout + proc.stderr  # 5: no test ran


def test_a_missing_optional_dependency_fails_under_ci(tmp_path):
    for value in ("true", "1", "yes"):
        proc = run_module(tmp_path, value)
        assert proc.returncode != 0 and "is missing under CI" in proc.stdout, proc.stdout + proc.stderr
