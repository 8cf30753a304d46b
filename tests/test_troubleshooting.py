"""The troubleshooting page (docs/how-to/troubleshooting.md) against the lines zarrmill prints: each
bad input below is refused with one ``zarrmill: error:`` line, exit code 2, no traceback, nothing
written beside it, and that line is on the page as printed, with ``<placeholders>`` where the
user's own paths, names and numbers go. A line reworded in the code and not on the page fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO, zarrmill_subprocess

PAGE = REPO / "docs" / "how-to" / "troubleshooting.md"
INGEST = ["task", "ingest", "--set", "input=raw"]

# id: (command line, folder contents besides raw/)
CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "unknown task": (["task", "injest", "--set", "input=raw"], {}),
    "misspelt parameter": (["task", "ingest", "--set", "inptu=raw", "--set", "output=p.zarr"], {}),
    "value out of bounds": ([*INGEST, "--set", "output=p.zarr", "--set", "codec.clevel=99"], {}),
    "unknown executor kind": ([*INGEST, "--set", "output=p.zarr", "--set", "executor.kind=slrum"], {}),
    "not a size": ([*INGEST, "--set", "output=p.zarr", "--executor", "slurm", "--set", "executor.slurm.memory=lots"], {}),
    "not a whole number": ([*INGEST, "--set", "output=p.zarr", "--executor", "slurm", "--set", "executor.slurm.cores=x"],
                           {}),
    "not a walltime": (["validate", "wf.yaml"], {"wf.yaml": "name: t\nexecutor:\n  kind: slurm\n  slurm:\n"
                                                 "    walltime: soon\nsteps:\n  ingest:\n    task: ingest\n"
                                                 "    params: {input: raw, output: p.zarr}\n"}),
    "no workflow file": (["run", "nofile.yaml"], {}),
    "misspelt workflow key": (["run", "wf.yaml"], {"wf.yaml": "name: t\nstpes:\n  a: {task: ingest}\n"}),
    "misspelt option": (["run", "wf.yaml", "--dyr-run"], {"wf.yaml": "name: t\nsteps: {}\n"}),
    "unknown sample": (["sample-data", "plates", "s"], {}),
    "output inside input": ([*INGEST, "--set", "output=raw/p.zarr"], {}),
    "a file on the output's path": ([*INGEST, "--set", "output=afile/p.zarr"], {"afile": "x\n"}),
    "not a zip archive": (["task", "ingest", "--set", "input=bad.ozx", "--set", "output=p.zarr"],
                          {"bad.ozx": "not a zip\n"}),
    "check of nothing": (["check", "nothing.zarr"], {}),
    "input not there": (["task", "ingest", "--set", "input=nothere", "--set", "output=p.zarr"], {}),
}


def documented_lines() -> list[re.Pattern[str]]:
    """Every ``zarrmill: error:`` and ``zarrmill: warning:`` line the page shows in its text blocks,
    as a pattern: ``<anything>`` stands for the user's own text."""
    text = PAGE.read_text()
    lines = [line.strip() for block in re.findall(r"```text\n(.*?)```", text, re.S) for line in block.splitlines()]
    return [re.compile(".+?".join(re.escape(part) for part in re.split(r"<[^<>]+>", line)))
            for line in lines if line.startswith(("zarrmill: error:", "zarrmill: warning:"))]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("sample") / "raw"
    made = zarrmill_subprocess("sample-data", "plate-cellvoyager", raw)
    assert made.returncode == 0, made.stderr
    return raw


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_bad_input_is_one_line_the_troubleshooting_page_shows(case, sample, tmp_path):
    argv, files = CASES[case]
    (tmp_path / "raw").symlink_to(sample)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = zarrmill_subprocess(*argv, cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("zarrmill: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a refused command wrote beside its input"
    line = errors[0].replace(str(tmp_path), "/home/me/work")
    assert any(p.fullmatch(line) for p in documented_lines()), \
        f"{case}: {line!r} is not on {PAGE.relative_to(REPO)} (add it, with <placeholders> for the user's text)"


def test_the_pages_lines_are_patterns_that_can_fail():
    """A mutant of the matcher: a line no page shows does not match."""
    assert not any(p.fullmatch("zarrmill: error: nothing zarrmill prints") for p in documented_lines())
    assert any(p.fullmatch("zarrmill: error: unknown sample 'x'; did you mean 'y'? (zarrmill sample-data lists all 3)")
               for p in documented_lines())  # <placeholders> stand for the user's text
    assert not any(p.fullmatch("zarrmill: error: unknown sample 'x'; did you mean 'y'?") for p in documented_lines())
